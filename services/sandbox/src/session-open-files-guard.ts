// What keeps each session within its open files (OZ0_SESSION_MAX_OPEN_FILES).
// The node has one table of open files for everyone (fs.file-max, about a
// tenth of its memory in kibibytes: 2.4 million on a 24 GiB node), and past
// it every open(2), socket(2) and pipe(2) of every process without
// CAP_SYS_ADMIN fails with ENFILE: other sessions, the other services, in
// Kubernetes every pod on the node. A session reaches it easily: each of its
// processes may hold as many descriptors as its RLIMIT_NOFILE (the sandbox's
// hard limit, raised by Node: a million in most containers) and it runs up to
// OZ0_SESSION_MAX_PROCESSES of them, and what the table holds is kernel
// memory, charged to no process, which the memory guard does not see. No
// namespace or rlimit bounds a session's total, so the guard counts it: every
// interval, on the guards' thread (guard-readings.ts), each running session's
// processes' descriptors, and a session above its limit is stopped at once
// (`open_files_limit`), saying how many it held.
//
// Counting is cheap first: a process's status gives the slots of its
// descriptor table (FDSize), which are never fewer than its descriptors;
// only a session whose slots add up to more than its limit has its
// processes' descriptors listed (/proc/<pid>/fd; a process closed to the
// sandbox counts its slots). A descriptor is counted whether or not another
// shares its open file (dup).
import { readdirSync, readFileSync, statSync } from "node:fs";
import type { Logger } from "@oz0/serving";
import type { GuardReadings } from "./guard-readings.js";
import { PeriodicCheck } from "./periodic-check.js";
import {
  processesOfSessions,
  runningSessions,
  type ListedProcess,
  type ProcessFinder,
  type SessionProcesses,
} from "./process-list.js";

/** A session's default limit, at most: plenty for builds, browsers and databases, a fortieth of a 24 GiB node's table. */
const MAX_DEFAULT_OPEN_FILES = 65_536;

/**
 * OZ0_SESSION_MAX_OPEN_FILES's default: 65,536, or less where the node's table is small, so that `maxSessions`
 * sessions at their limit leave half of it to everything else.
 */
export function defaultMaxOpenFiles(maxSessions: number): number {
  let fileMax = Infinity;
  try {
    fileMax = Number(readFileSync("/proc/sys/fs/file-max", "utf8").trim()) || Infinity;
  } catch {
    // not Linux's /proc: the ceiling alone
  }
  return Math.max(1024, Math.min(MAX_DEFAULT_OPEN_FILES, Math.floor(fileMax / (2 * maxSessions))));
}

/**
 * Pseudo-terminals, which every devpts but the node's first (the host's) draws from one count: kernel.pty.max less
 * kernel.pty.reserve (4,096 less 1,024 by default). bwrap gives each session a devpts of its own, a session opened
 * all 3,071 of them in a second with 3,071 descriptors, far below its open files limit, and then no other session,
 * and no container of the node (each has a devpts of its own too), could open one (attacker review). So once the
 * node has used half of them, the sessions' pty masters are counted, and a session holding more than its share,
 * half of them over `maxSessions` (at least 16), is stopped. Undefined where the kernel does not say.
 */
export function ptyShare(maxSessions: number): PtyShare | undefined {
  try {
    const read = (name: string): number => Number(readFileSync(`/proc/sys/kernel/pty/${name}`, "utf8").trim());
    const shared = read("max") - read("reserve");
    if (!(shared > 0)) return undefined;
    return {
      total: shared,
      lookAbove: Math.floor(shared / 2),
      perSession: Math.max(16, Math.floor(shared / (2 * maxSessions))),
    };
  } catch {
    return undefined; // not Linux's /proc
  }
}

export interface PtyShare {
  /** The ptys every devpts but the host's draws from: kernel.pty.max less kernel.pty.reserve. */
  total: number;
  /** Above this many ptys open on the node (kernel.pty.nr), the sessions' are counted. */
  lookAbove: number;
  /** The most a session may hold then. */
  perSession: number;
}

/** A session as the guard sees it. */
export interface OpenFilesGuardedSession {
  readonly id: string;
  readonly running: boolean;
  /** How its processes are found; undefined: none yet (not started). */
  readonly processes?: SessionProcesses | undefined;
  /** Stops it at once, saying why. */
  stopForOpenFiles(message: string): void;
}

export interface SessionOpenFilesGuardOptions {
  /** The most descriptors a session's processes may hold together; 0: not counted (the ptys still are). */
  maxOpenFiles: number;
  /** Between checks. Default 1000 ms. */
  intervalMs?: number;
  /** The sessions' share of the node's ptys ({@link ptyShare}); undefined: not counted. */
  ptys?: PtyShare | undefined;
  /** How many ptys the node has open now (kernel.pty.nr); a test's stand-in. */
  ptysOpen?: () => number;
  sessions: () => Iterable<OpenFilesGuardedSession>;
  /** Where /proc is read, off the event loop. */
  readings: GuardReadings;
  logger: Logger;
}

/** A session found above its limit, with the descriptors its processes held. */
export interface OpenFilesOverLimit {
  readonly sessionId: string;
  readonly descriptors: number;
}

export class SessionOpenFilesGuard {
  readonly #options: SessionOpenFilesGuardOptions;
  readonly #checks: PeriodicCheck;

  constructor(options: SessionOpenFilesGuardOptions) {
    this.#options = options;
    this.#checks = new PeriodicCheck({
      intervalMs: options.intervalMs,
      check: () => this.#check(),
      onError: (error) => options.logger.error({ err: error }, "could not count the sessions' open files"),
    });
  }

  /** One check (the timer's); never throws. */
  check(): Promise<void> {
    return this.#checks.run();
  }

  async #check(): Promise<void> {
    const { running, finders } = runningSessions(this.#options.sessions());
    if (finders.size === 0) return;
    const max = this.#options.maxOpenFiles;
    for (const { sessionId, descriptors } of max > 0
      ? await this.#options.readings.sessionsOverOpenFiles({ sessions: finders, max })
      : []) {
      const session = running.get(sessionId)!;
      if (!session.running) continue; // ended while the reading ran
      this.#options.logger.warn(
        { sessionId, descriptors, maxOpenFiles: max },
        "session stopped: it held more open files than a session may",
      );
      try {
        session.stopForOpenFiles(
          `the session's processes held ${descriptors} open files (descriptors), above a session's limit of ${max} (OZ0_SESSION_MAX_OPEN_FILES); the session was stopped`,
        );
      } catch (error) {
        this.#options.logger.error({ err: error, sessionId }, "could not stop a session over its open files");
      }
    }
    const { ptys } = this.#options;
    if (ptys === undefined) return;
    const open = (this.#options.ptysOpen ?? nodePtysOpen)();
    if (open <= ptys.lookAbove) return;
    for (const { sessionId, ptys: held } of await this.#options.readings.sessionsOverPtys({
      sessions: finders,
      max: ptys.perSession,
    })) {
      const session = running.get(sessionId)!;
      if (!session.running) continue;
      this.#options.logger.warn(
        { sessionId, ptys: held, maxPtys: ptys.perSession, nodePtys: open },
        "session stopped: it held more pseudo-terminals than a session may while the node's run short",
      );
      try {
        session.stopForOpenFiles(
          `the session's processes held ${held} pseudo-terminals (/dev/ptmx), above a session's share of ${ptys.perSession} while the node had ${open} of its ${ptys.total} open (kernel.pty.max less kernel.pty.reserve, shared by every session and container of the node); the session was stopped`,
        );
      } catch (error) {
        this.#options.logger.error({ err: error, sessionId }, "could not stop a session over its ptys");
      }
    }
  }

  close(): void {
    this.#checks.close();
  }
}

/** The sessions whose processes hold more than `max` descriptors now: read from /proc, on the guards' thread. */
export function sessionsOverOpenFiles(options: {
  sessions: ReadonlyMap<string, ProcessFinder>;
  max: number;
}): OpenFilesOverLimit[] {
  const over: OpenFilesOverLimit[] = [];
  for (const [sessionId, processes] of processesOfSessions(options.sessions)) {
    const slots = processes.reduce((total, entry) => total + entry.descriptorSlots, 0);
    if (slots <= options.max) continue;
    // Listed until past the limit: no further than the limit and one process's descriptors, however many it holds.
    let descriptors = 0;
    for (const process of processes) {
      descriptors += descriptorsOf(process);
      if (descriptors > options.max) break;
    }
    if (descriptors > options.max) over.push({ sessionId, descriptors });
  }
  return over;
}

/** kernel.pty.nr: the ptys open on the node, in every devpts; 0 where it cannot be read. */
function nodePtysOpen(): number {
  try {
    return Number(readFileSync("/proc/sys/kernel/pty/nr", "utf8").trim()) || 0;
  } catch {
    return 0;
  }
}

/** /dev/ptmx's device number (5, 2): a pty master's descriptor is that device, in whichever devpts it was opened. */
const PTMX_DEVICE = (5 << 8) | 2;

/**
 * The sessions whose processes hold more than `max` pty masters now, each counted once (its `tty-index`, a
 * session's devpts being its own: a master passed between processes or duplicated is one pty); on the guards' thread.
 */
export function sessionsOverPtys(options: {
  sessions: ReadonlyMap<string, ProcessFinder>;
  max: number;
}): { sessionId: string; ptys: number }[] {
  const over: { sessionId: string; ptys: number }[] = [];
  for (const [sessionId, processes] of processesOfSessions(options.sessions)) {
    const held = new Set<string>();
    for (const process of processes) {
      let fds: string[];
      try {
        fds = readdirSync(`${process.dir}/fd`);
      } catch {
        continue; // gone, or closed to the sandbox
      }
      for (const fd of fds) {
        const info = statSync(`${process.dir}/fd/${fd}`, { throwIfNoEntry: false });
        if (info === undefined || !info.isCharacterDevice() || info.rdev !== PTMX_DEVICE) continue;
        let index: string;
        try {
          index =
            /^tty-index:\s*(\d+)/m.exec(readFileSync(`${process.dir}/fdinfo/${fd}`, "utf8"))?.[1] ??
            `${process.pid}/${fd}`;
        } catch {
          continue; // closed meanwhile
        }
        held.add(index);
      }
      if (held.size > options.max) break;
    }
    if (held.size > options.max) over.push({ sessionId, ptys: held.size });
  }
  return over;
}

/**
 * How many descriptors the process holds open; its table's slots when its descriptors cannot be listed (a process
 * that made itself undumpable is closed to a sandbox that is not root): never fewer than it holds.
 */
function descriptorsOf(process: ListedProcess): number {
  try {
    return readdirSync(`${process.dir}/fd`).length;
  } catch {
    return process.descriptorSlots;
  }
}
