// What a session yields to the sandbox, which serves every session, and to
// the other services on the node: memory and CPU. There are no per-session
// cgroups, so the kernel is told by the two numbers each process carries
// and its descendants inherit.
//
// Memory: whom the OOM killer takes first when the node, or the sandbox's
// pod, runs out. Every process of a session starts with oom_score_adj at its
// maximum, 1000: the OOM killer takes the session's processes before any
// other, the largest first. A session may lower it again, back to what the
// sandbox itself has and never below, unless the sandbox holds
// CAP_SYS_RESOURCE (root on a host, not in a container's default set): a
// write with it also sets the floor (oom_score_adj_min) at 1000, where it is
// written by the sandbox (the `user` and `none` modes) rather than by a
// keeper running as another user.
//
// CPU: a session that keeps every core busy (a build's -j, a loop) must not
// starve the sandbox's guards, its RPCs and the node's heartbeat. Every
// process of a session starts at nice 10, a tenth of the weight of a process
// at 0 under the kernel's fair scheduler; when nothing else wants the CPU it
// gets all of it. Without CAP_SYS_NICE (which no session holds, but a `none`
// session of a root sandbox) a process can raise its nice value, never lower it.
import { writeFileSync } from "node:fs";
import { setPriority } from "node:os";
import type { HarnessLauncher } from "@oz0/harness/host";

/** The highest oom_score_adj: the first to be taken. */
export const SESSION_OOM_SCORE_ADJ = 1000;

/** The nice value sessions run at: below the sandbox's (0), so it keeps its share of the CPU. */
export const SESSION_NICE = 10;

/**
 * A launcher whose harness gets SESSION_OOM_SCORE_ADJ and SESSION_NICE as
 * soon as it is started: written right after spawn returns, when the
 * launcher's first program has just been executed (the harness itself, or
 * the wrappers that exec it), before it has had the time to fork. A session
 * run under its keeper is not started through it: the keeper sets both in
 * the harness's process before its exec (session-keeper.ts).
 */
export function yieldingLauncher(inner: HarnessLauncher): HarnessLauncher {
  return {
    launch(spec) {
      const launched = inner.launch(spec);
      const { pid } = launched.child;
      if (pid !== undefined) {
        try {
          writeFileSync(`/proc/${pid}/oom_score_adj`, String(SESSION_OOM_SCORE_ADJ));
        } catch {
          // Gone already (its exit reports it), or a kernel without the file.
        }
        try {
          setPriority(pid, SESSION_NICE);
        } catch {
          // Gone already.
        }
      }
      return launched;
    },
  };
}
