// Whom the kernel's OOM killer takes first when the node, or the sandbox's
// pod, runs out of memory: a session's process, never the sandbox, which
// serves every session (nor the other services on the node). Nothing limits
// a session's memory (there are no per-session cgroups), so one session
// allocating without end would otherwise as likely end the sandbox.
//
// Every process of a session starts with oom_score_adj at its maximum, 1000,
// which its descendants inherit: the OOM killer takes the session's processes
// before any other, the largest first. A session may lower it again, back to
// what the sandbox itself has and never below, unless the sandbox holds
// CAP_SYS_RESOURCE (root on a host, not in a container's default set): a
// write with it also sets the floor (oom_score_adj_min) at 1000, where it is
// written by the sandbox (the `user` and `none` modes) rather than by a
// keeper running as another user.
import { writeFileSync } from "node:fs";
import type { HarnessLauncher } from "@oz0/harness/host";

/** The highest oom_score_adj: the first to be taken. */
export const SESSION_OOM_SCORE_ADJ = 1000;

/**
 * A launcher whose harness gets SESSION_OOM_SCORE_ADJ as soon as it is
 * started: written right after spawn returns, when the launcher's first
 * program has just been executed (the harness itself, or the wrappers that
 * exec it), before it has had the time to fork. A session run under its
 * keeper is not started through it: the keeper sets it in the harness's
 * process before its exec (session-keeper.ts).
 */
export function oomFirstLauncher(inner: HarnessLauncher): HarnessLauncher {
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
      }
      return launched;
    },
  };
}
