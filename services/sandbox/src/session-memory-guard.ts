// What keeps each session within its memory (OZ0_SESSION_MAX_MEMORY_BYTES). No cgroup per session exists where the
// sandbox runs unprivileged (a pod's cgroup is not its own to divide), so the guard reads, every interval, what each
// running session's processes take that the node cannot reclaim without ending them: their anonymous and shared
// memory, swapped out or not, each page shared between processes counted once across them (the kernel's
// proportional set size, /proc/<pid>/smaps_rollup). A session above its limit is stopped at once (`memory_limit`),
// saying how much it took. Best effort: what a session allocates between two checks lands, and the OOM killer,
// which takes sessions' processes first (session-oom-score.ts), is what holds the node meanwhile.
import { readFileSync } from "node:fs";
import type { Logger } from "@oz0/serving";
import { processesOfSessions, type SessionProcesses } from "./process-list.js";

/** A session as the guard sees it. */
export interface MemoryGuardedSession {
  readonly id: string;
  readonly running: boolean;
  /** How its processes are found; undefined: none yet (not started). */
  readonly processes?: SessionProcesses | undefined;
  /** Stops it at once, saying why. */
  stopForMemory(message: string): void;
}

export interface SessionMemoryGuardOptions {
  /** The most a session's processes may take together, in bytes. */
  maxBytes: number;
  /** Between checks. Default 1000 ms. */
  intervalMs?: number;
  sessions: () => Iterable<MemoryGuardedSession>;
  logger: Logger;
}

export class SessionMemoryGuard {
  readonly #options: SessionMemoryGuardOptions;
  readonly #timer: NodeJS.Timeout;

  constructor(options: SessionMemoryGuardOptions) {
    this.#options = options;
    this.#timer = setInterval(() => this.check(), options.intervalMs ?? 1000);
    this.#timer.unref();
  }

  /** One check (the timer's); never throws. */
  check(): void {
    const running = [...this.#options.sessions()].filter((session) => session.running);
    const owners = new Map<string, SessionProcesses>();
    for (const session of running) if (session.processes !== undefined) owners.set(session.id, session.processes);
    if (owners.size === 0) return;
    const pids = processesOfSessions(owners);
    for (const session of running) {
      const sessionPids = pids.get(session.id) ?? [];
      // Resident memory first, a few counters the kernel keeps per process (microseconds); it counts each page two
      // processes share in both, so it is never below the proportional figure, which walks every mapping (about a
      // millisecond for a large process) and is read only for a session the first puts above its limit.
      const resident = sessionPids.reduce((sum, pid) => sum + processMemory(pid, "resident"), 0);
      if (resident <= this.#options.maxBytes) continue;
      const taken = sessionPids.reduce((sum, pid) => sum + processMemory(pid, "proportional"), 0);
      if (taken <= this.#options.maxBytes) continue;
      this.#options.logger.warn(
        { sessionId: session.id, bytes: taken, maxBytes: this.#options.maxBytes },
        "session stopped: it took more memory than a session may",
      );
      try {
        session.stopForMemory(
          `the session's processes took ${mebibytes(taken)} of memory, above a session's limit of ${mebibytes(this.#options.maxBytes)} (OZ0_SESSION_MAX_MEMORY_BYTES); the session was stopped`,
        );
      } catch (error) {
        this.#options.logger.error({ err: error, sessionId: session.id }, "could not stop a session over its memory");
      }
    }
  }

  close(): void {
    clearInterval(this.#timer);
  }
}

function mebibytes(bytes: number): string {
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/**
 * What the process takes that the node cannot reclaim without ending it, in bytes: its anonymous and shared
 * (shmem) memory and what of it is swapped out, `resident` in full (/proc/<pid>/status), `proportional` as its share
 * of each page it shares with other processes (/proc/<pid>/smaps_rollup; where the kernel gives no Pss_Anon, older
 * ones, as `resident`). 0 when it is gone or not this sandbox's to read.
 */
export function processMemory(pid: number, how: "resident" | "proportional"): number {
  const kibibytes = (text: string, field: string): number | undefined => {
    const value = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1];
    return value === undefined ? undefined : Number(value) * 1024;
  };
  try {
    if (how === "proportional") {
      const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, "utf8");
      const anon = kibibytes(rollup, "Pss_Anon");
      if (anon !== undefined) return anon + (kibibytes(rollup, "Pss_Shmem") ?? 0) + (kibibytes(rollup, "SwapPss") ?? 0);
    }
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return (
      (kibibytes(status, "RssAnon") ?? 0) + (kibibytes(status, "RssShmem") ?? 0) + (kibibytes(status, "VmSwap") ?? 0)
    );
  } catch {
    return 0; // gone meanwhile, or closed to this sandbox
  }
}
