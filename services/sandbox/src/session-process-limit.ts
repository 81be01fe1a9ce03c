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
// Under bubblewrap, the namespace's init (bwrap's pid 1) was forked before
// prlimit ran, and a session can ptrace it (the same user in the same
// namespace) and fork from it: the wrapper lowers its limit too, before the
// harness starts.
// - under bubblewrap run by a root sandbox, a uid per session, as in the
//   `user` mode, with no user namespace (bubblewrap-launcher.ts); prlimit
//   runs as root inside, before setpriv drops to the uid, and bwrap's init
//   stays root's, which the uid cannot ptrace.
// The kernel exempts uid 0 of the initial user namespace (a root sandbox
// whose sessions get no uid of their own); before Linux 5.14 it counted a uid's
// processes across every namespace; and in the `none` mode every session
// runs as the sandbox's own user, counted together: there nothing is set,
// and the start-up line says why.
import { readFileSync } from "node:fs";
import type { IsolationName } from "./isolation-choice.js";

export const DEFAULT_SESSION_MAX_PROCESSES = 1024;
/** Processes the sandbox keeps for itself beyond its sessions' limits: its threads, keepers, helpers. */
const SANDBOX_HEADROOM = 256;

export interface SessionProcessLimit {
  /** Processes and threads of the session at once. */
  max: number;
  prlimitPath: string;
  /**
   * The most descriptors each of its processes may hold (RLIMIT_NOFILE, soft and hard): the session's open files
   * limit (session-open-files-guard.ts) where that is below the sandbox's own, which sessions would otherwise
   * inherit (a million in most containers). No one process of a session may then hold more than the whole session
   * may, nor grow a descriptor table of a million slots (8 MiB of the kernel's memory, which no guard sees) with one
   * dup2.
   */
  maxOpenFiles?: number | undefined;
}

/** This process's soft RLIMIT_NOFILE (Node raises it to the hard limit at start); 1024, the usual default, when unreadable. */
export function ownOpenFilesLimit(): number {
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const soft = Number(line?.split(/\s{2,}/)[1]);
    return Number.isSafeInteger(soft) && soft > 0 ? soft : 1024;
  } catch {
    return 1024;
  }
}

export type ProcessLimitChoice =
  | { limit: SessionProcessLimit; reason?: string; warning?: string }
  | { limit: undefined; reason: string; warning?: undefined };

/** A process's RLIMIT_NPROC, soft and hard; Infinity for unlimited. */
export interface OwnProcessLimit {
  soft: number;
  hard: number;
}

/**
 * True when this process is uid 0 of the initial user namespace, whose
 * processes the kernel never counts against RLIMIT_NPROC. Only the initial
 * namespace maps uid 0 onto uid 0 for the whole range of ids; root in a
 * user namespace of its own (a Kubernetes pod with `hostUsers: false`) is
 * another user to the kernel, and is limited.
 */
export function runsAsInitialRoot(uidMap = readUidMap()): boolean {
  if (process.getuid?.() !== 0) return false;
  if (uidMap === undefined) return true;
  return uidMap
    .split("\n")
    .map((line) => line.trim().split(/\s+/))
    .some(([inside, outside, count]) => inside === "0" && outside === "0" && count === "4294967295");
}

function readUidMap(): string | undefined {
  try {
    return readFileSync("/proc/self/uid_map", "utf8");
  } catch {
    return undefined;
  }
}

/** This process's own limit on its user's processes (`ulimit -u`), from /proc/self/limits. */
export function ownProcessLimit(limits = readFileSync("/proc/self/limits", "utf8")): OwnProcessLimit {
  const [, soft, hard] = /^Max processes\s+(\S+)\s+(\S+)/m.exec(limits) ?? [];
  const value = (text: string | undefined): number =>
    text === undefined || text === "unlimited" ? Infinity : Number(text);
  return { soft: value(soft), hard: value(hard) };
}

/** Whether the kernel counts RLIMIT_NPROC per user namespace (Linux 5.14 and later). */
export function countsPerUserNamespace(release: string): boolean {
  const [, major, minor] = /^(\d+)\.(\d+)/.exec(release) ?? [];
  return Number(major) > 5 || (Number(major) === 5 && Number(minor) >= 14);
}

export function chooseSessionProcessLimit(options: {
  isolation: IsolationName;
  /** OZ0_SESSION_MAX_PROCESSES; 0 turns the limit off. */
  max: number;
  prlimitPath: string | undefined;
  initialRoot: boolean;
  /** The kernel's release (`uname -r`). */
  kernel: string;
  /** The sandbox's own RLIMIT_NPROC. */
  own: OwnProcessLimit;
  /** OZ0_MAX_SESSIONS. */
  maxSessions: number;
  /** Under bubblewrap, each session runs under a uid of its own (a root sandbox: bubblewrap-launcher.ts). */
  sessionUids?: boolean;
}): ProcessLimitChoice {
  const { prlimitPath, own } = options;
  // The sessions' processes are the sandbox user's, in a user namespace per session; else each session's uid's.
  const inUserNamespaces = options.isolation === "bwrap" && options.sessionUids !== true;
  if (options.max === 0) return { limit: undefined, reason: "OZ0_SESSION_MAX_PROCESSES=0" };
  if (options.isolation === "none")
    return {
      limit: undefined,
      reason: "the none mode runs every session as the sandbox's own user, whose processes the kernel counts together",
    };
  if (inUserNamespaces && options.initialRoot)
    return {
      limit: undefined,
      reason:
        "the sandbox runs as root, whose processes the kernel does not limit, and its sessions as root too (no uid of their own: see the start-up line's sessionUidsReason): run it as an unprivileged user (as the Kubernetes manifests do)",
    };
  if (inUserNamespaces && !countsPerUserNamespace(options.kernel))
    return {
      limit: undefined,
      reason: `Linux ${options.kernel} counts a user's processes across every user namespace (per namespace since 5.14): a limit would count every session's together`,
    };
  if (prlimitPath === undefined)
    return { limit: undefined, reason: "prlimit (util-linux) not found in /usr/bin or /bin" };
  // A process cannot raise its hard limit (without CAP_SYS_RESOURCE, which containers lack), and the session's
  // wrapper is the sandbox's child.
  const max = Math.min(options.max, own.hard);
  const reason =
    max < options.max
      ? `lowered from ${options.max} to the sandbox's own hard limit on processes (ulimit -Hu)`
      : undefined;
  // In user namespaces the sessions' processes are the sandbox user's too. Under uids of their own they are other
  // uids', and nothing runs as one under the sandbox's own limit (session-user-helper.ts).
  const needed = max * options.maxSessions + SANDBOX_HEADROOM;
  const warning =
    inUserNamespaces && own.soft < needed
      ? `the sandbox's own limit on processes (ulimit -u, ${own.soft}) is below OZ0_SESSION_MAX_PROCESSES (${max}) x OZ0_MAX_SESSIONS (${options.maxSessions}) + ${SANDBOX_HEADROOM}: sessions at their limits can leave the sandbox unable to start processes; raise it or lower OZ0_SESSION_MAX_PROCESSES`
      : undefined;
  return {
    limit: { max, prlimitPath },
    ...(reason !== undefined ? { reason } : {}),
    ...(warning !== undefined ? { warning } : {}),
  };
}

/** prlimit's arguments for the limits, each soft and hard. */
function limitArgs(limit: SessionProcessLimit): string[] {
  return [`--nproc=${limit.max}`, ...(limit.maxOpenFiles !== undefined ? [`--nofile=${limit.maxOpenFiles}`] : [])];
}

/** `command` run under the limit: prlimit sets it (soft and hard) and execs the command in its place. */
export function withProcessLimit(limit: SessionProcessLimit | undefined, command: readonly string[]): string[] {
  if (limit === undefined) return [...command];
  return [limit.prlimitPath, ...limitArgs(limit), "--", ...command];
}

/**
 * `command` run under the limit as the first process inside a PID
 * namespace: the namespace's init (pid 1) gets the limit first, then the
 * command. The init was forked before anything in the namespace could set
 * one, and the session could ptrace it and fork from it.
 */
export function withProcessLimitAndInit(limit: SessionProcessLimit | undefined, command: readonly string[]): string[] {
  if (limit === undefined) return [...command];
  // The init holds no descriptors a session could use; the command's limits are all of them.
  return [
    "/bin/sh",
    "-c",
    '"$0" --pid 1 --nproc="$1" && shift && exec "$0" "$@"',
    limit.prlimitPath,
    String(limit.max),
    ...limitArgs(limit),
    "--",
    ...command,
  ];
}
