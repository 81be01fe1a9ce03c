// The processes of a session's uid. Everything a session starts runs under
// its uid, whatever process group or session it moves to, so the uid is the
// one handle that reaches a harness's escaped descendants: a process running
// as that uid calls kill(-1, SIGKILL), and the kernel signals every process
// of the uid in one pass that a fork cannot slip past (a process with a
// pending SIGKILL cannot complete a fork).
import { listProcesses, ownPidNamespaceDepth } from "./process-list.js";
import type { SessionUidRange } from "./sandbox-config.js";
import { runAsSessionUser } from "./session-user-helper.js";

/** A session's uid and its gid (of the same number in this sandbox). */
export interface SessionUser {
  readonly uid: number;
  readonly gid: number;
}

/**
 * The uids in the range whose processes are still alive (zombies aside), by real uid, read from /proc; each with
 * whether one of them runs in this process's own PID namespace (not in a bubblewrap session's, below it).
 */
export function uidsWithProcesses(range: SessionUidRange): Map<number, { inOwnPidNamespace: boolean }> {
  const found = new Map<number, { inOwnPidNamespace: boolean }>();
  const processes = listProcesses();
  if (processes.length === 0) return found;
  const ownDepth = ownPidNamespaceDepth();
  for (const { uid, pidNamespaceDepth } of processes) {
    if (uid < range.base || uid >= range.base + range.count) continue;
    const here = pidNamespaceDepth === ownDepth;
    found.set(uid, { inOwnPidNamespace: here || found.get(uid)?.inOwnPidNamespace === true });
  }
  return found;
}

/** How long the processes of a uid may take to die once killed; past it the caller logs an error. */
const KILL_WAIT_MS = 5000;
const POLL_MS = 10;

/**
 * SIGKILLs every process of the uid (the killer itself aside) and resolves
 * once none is left alive, so nothing of the session runs when the caller
 * goes on (reads its directory, reports its end). Never rejects: resolves
 * with the error when the killer could not run or a process outlived the
 * wait (the caller logs it).
 */
export async function killAllProcessesOf(user: SessionUser): Promise<Error | undefined> {
  const range = { base: user.uid, count: 1 };
  for (let waited = 0; ; waited += POLL_MS) {
    const error = await killOnce(user);
    if (error !== undefined) return error;
    // SIGKILL is carried out as each process next runs; a dying one is not a zombie yet.
    if (uidsWithProcesses(range).size === 0) return undefined;
    if (waited >= KILL_WAIT_MS)
      return new Error(`processes of uid ${user.uid} were still alive ${KILL_WAIT_MS} ms after SIGKILL`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Every process of the uid but the helper itself; kill(2) fails only when there was none left to signal. */
const KILL_ALL = "kill 'KILL', -1;";

async function killOnce(user: SessionUser): Promise<Error | undefined> {
  // As the uid, but never ptrace-able by its processes (session-user-helper.ts).
  try {
    const { status, stderr } = await runAsSessionUser({ user, script: KILL_ALL });
    // Killed itself (status null) by another killer of the same uid running at once: the caller looks at what is left.
    return status === 0 || status === null
      ? undefined
      : new Error(`the killer of uid ${user.uid}'s processes failed (${stderr || `status ${status}`})`);
  } catch (error) {
    return error instanceof Error ? error : new Error(String(error));
  }
}
