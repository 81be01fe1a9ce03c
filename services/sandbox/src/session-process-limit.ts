// How many processes a session may run at once (OZ0_SESSION_MAX_PROCESSES):
// a fork bomb in one session must not take the node's process table, and
// with it every other session and the sandbox itself.
//
// The kernel's RLIMIT_NPROC holds it, set by prlimit (util-linux) right
// before the harness, so the harness and everything it starts inherit it
// and cannot raise it. The kernel counts the processes and threads of the
// process's user in its user namespace, which makes it a count per session
// where each session has a user of its own:
// - under bubblewrap, a user namespace per session. prlimit runs inside it:
//   a limit bwrap itself had when it made the namespace would also become
//   that namespace's ceiling for the sandbox user's processes in the parent,
//   every session's together.
// - in the `user` mode, a uid per session (a session sharing another's
//   working directory runs under its uid, and shares its count).
// The kernel exempts uid 0 of the initial user namespace (a sandbox running
// as plain root under bubblewrap), and in the `none` mode every session runs
// as the sandbox's own user, counted together: there nothing is set, and the
// start-up line says why.
import { existsSync, readFileSync } from "node:fs";
import type { IsolationName } from "./isolation-choice.js";

export const DEFAULT_SESSION_MAX_PROCESSES = 1024;

export interface SessionProcessLimit {
  /** Processes and threads of the session at once. */
  max: number;
  prlimitPath: string;
}

export type ProcessLimitChoice =
  { limit: SessionProcessLimit; reason?: undefined } | { limit: undefined; reason: string };

export function findPrlimit(): string | undefined {
  return ["/usr/bin/prlimit", "/bin/prlimit"].find((candidate) => existsSync(candidate));
}

/**
 * True when this process is uid 0 of the initial user namespace, whose
 * processes the kernel never counts against RLIMIT_NPROC. Root in a user
 * namespace of its own (a Kubernetes pod with `hostUsers: false`) is
 * another user to the kernel, and is limited.
 */
export function runsAsInitialRoot(): boolean {
  if (process.getuid?.() !== 0) return false;
  try {
    // "0 0 4294967295": uid 0 here is uid 0 of the parent, the whole range mapped (the initial namespace's map).
    const [inside, outside] = readFileSync("/proc/self/uid_map", "utf8").trim().split(/\s+/);
    return inside === "0" && outside === "0";
  } catch {
    return true;
  }
}

export function chooseSessionProcessLimit(options: {
  isolation: IsolationName;
  /** OZ0_SESSION_MAX_PROCESSES; 0 turns the limit off. */
  max: number;
  prlimitPath: string | undefined;
  initialRoot: boolean;
}): ProcessLimitChoice {
  const { max, prlimitPath } = options;
  if (max === 0) return { limit: undefined, reason: "OZ0_SESSION_MAX_PROCESSES=0" };
  if (options.isolation === "none")
    return {
      limit: undefined,
      reason: "the none mode runs every session as the sandbox's own user, whose processes the kernel counts together",
    };
  if (options.isolation === "bwrap" && options.initialRoot)
    return {
      limit: undefined,
      reason:
        "the sandbox runs as root, whose processes the kernel does not limit: run it as an unprivileged user (as the Kubernetes manifests do)",
    };
  if (prlimitPath === undefined)
    return { limit: undefined, reason: "prlimit (util-linux) not found in /usr/bin or /bin" };
  return { limit: { max, prlimitPath } };
}

/** `command` run under the limit: prlimit sets it (soft and hard) and execs the command in its place. */
export function withProcessLimit(limit: SessionProcessLimit | undefined, command: readonly string[]): string[] {
  if (limit === undefined) return [...command];
  return [limit.prlimitPath, `--nproc=${limit.max}`, "--", ...command];
}
