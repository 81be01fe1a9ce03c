// What keeps each session within its memory (OZ0_SESSION_MAX_MEMORY_BYTES). No cgroup per session exists where the
// sandbox runs unprivileged (a pod's cgroup is not its own to divide), so the guard reads, every interval, on a
// thread of its own (guard-readings.ts, sessionsOverMemory below), what each
// running session's processes take that the node cannot reclaim without ending them: their anonymous and shared
// memory, swapped out or not, each page shared between processes counted once across them (the kernel's
// proportional set size, /proc/<pid>/smaps_rollup). A session above its limit is stopped at once (`memory_limit`),
// saying how much it took. Best effort: what a session allocates between two checks lands, and the OOM killer,
// which takes sessions' processes first (session-precedence.ts), is what holds the node meanwhile.
//
// A file in a tmpfs is memory too, charged to no process unless mapped. Under bubblewrap a session writes to none
// (bubblewrap-mounts.ts); in the `user` mode it shares the node's /dev/shm (a tmpfs everywhere) and /tmp where that
// is one, so there the files its uid owns in them count with its processes, as do the System V segments its uid owns
// and no process has attached. In every mode the files of memory with no name its processes hold (a memfd, a
// deleted tmpfs file: held-memory-files.ts) count whole.
import { readFileSync } from "node:fs";
import type { Logger } from "@oz0/serving";
import { heldMemoryFiles, mappedFromFiles } from "./held-memory-files.js";
import type { GuardReadings } from "./guard-readings.js";
import { fromRandomStart, MAX_LOOKED_AT_PER_CHECK } from "./held-deleted-files.js";
import { PeriodicCheck } from "./periodic-check.js";
import {
  kibibytes,
  processesOfSessions,
  residentBytes,
  runningSessions,
  type ProcessFinder,
  type SessionProcesses,
} from "./process-list.js";
import { mebibytes } from "./session-disk-guard.js";
import { forEachOwnedEntry, sharedTmpfsPlaces } from "./shared-place-entries.js";
import { systemVTable } from "./session-user-files.js";

/**
 * The most entries of the node's tmpfs places one check looks at: a session making a million empty files there must
 * not hold the guard's every check up (what lies past the budget is not counted).
 */
const MAX_WALKED_ENTRIES = 50_000;
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
  /** Where /proc is read, off the event loop. */
  readings: GuardReadings;
  logger: Logger;
}

/** Where a session's memory was, beside its processes', in bytes. */
export interface MemoryOutside {
  /** Its files in the node's tmpfs places (`user` mode). */
  inTmpfs: number;
  /** System V segments it made and no process attaches (`user` mode). */
  detached: number;
  /** Files of memory with no name its processes hold, and how many. */
  held: number;
  heldFiles: number;
}

/** A session found above its limit. */
export interface MemoryOverLimit {
  readonly sessionId: string;
  readonly bytes: number;
  readonly outside: MemoryOutside;
}

export class SessionMemoryGuard {
  readonly #options: SessionMemoryGuardOptions;
  readonly #checks: PeriodicCheck;
  /** The node's shared places that are a tmpfs, where a `user`-mode session's files are memory. */
  readonly #sharedTmpfs: readonly string[];

  constructor(options: SessionMemoryGuardOptions) {
    this.#options = options;
    this.#sharedTmpfs = sharedTmpfsPlaces();
    this.#checks = new PeriodicCheck({
      intervalMs: options.intervalMs,
      check: () => this.#check(),
      onError: (error) => options.logger.error({ err: error }, "could not read the sessions' memory"),
    });
  }

  /** One check (the timer's); never throws. */
  check(): Promise<void> {
    return this.#checks.run();
  }

  async #check(): Promise<void> {
    const { running, finders } = runningSessions(this.#options.sessions());
    if (finders.size === 0) return;
    const over = await this.#options.readings.sessionsOverMemory({
      sessions: finders,
      maxBytes: this.#options.maxBytes,
      sharedTmpfs: this.#sharedTmpfs,
    });
    for (const { sessionId, bytes, outside } of over) this.#stop(running.get(sessionId)!, bytes, outside);
  }

  #stop(session: MemoryGuardedSession, bytes: number, outside: MemoryOutside): void {
    if (!session.running) return; // ended while the reading ran
    const maxBytes = this.#options.maxBytes;
    this.#options.logger.warn(
      { sessionId: session.id, bytes, maxBytes },
      "session stopped: it took more memory than a session may",
    );
    try {
      session.stopForMemory(
        `the session took ${mebibytes(bytes)} of memory (${this.#describe(outside)}), above a session's limit of ${mebibytes(maxBytes)} (OZ0_SESSION_MAX_MEMORY_BYTES); the session was stopped`,
      );
    } catch (error) {
      this.#options.logger.error({ err: error, sessionId: session.id }, "could not stop a session over its memory");
    }
  }

  /** Where a stopped session's memory was, beside its processes'. */
  #describe(outside: MemoryOutside): string {
    const parts = ["its processes"];
    if (outside.held > 0)
      parts.push(
        `${outside.heldFiles} ${outside.heldFiles === 1 ? "file" : "files"} of memory with no name they hold (memfd, deleted tmpfs files): ${mebibytes(outside.held)}`,
      );
    if (outside.inTmpfs > 0)
      parts.push(`its files in the node's ${this.#sharedTmpfs.join(", ")}: ${mebibytes(outside.inTmpfs)}`);
    if (outside.detached > 0)
      parts.push(`System V shared memory segments it detached from: ${mebibytes(outside.detached)}`);
    return parts.length === 1 ? parts[0]! : `${parts.slice(0, -1).join(", ")}, and ${parts.at(-1)}`;
  }

  close(): void {
    this.#checks.close();
  }
}

/**
 * The sessions above `maxBytes` now, with what each took: read from /proc, on the guard's thread (guard-readings.ts).
 * The files of memory with no name are looked for within a budget of each session, its processes taken from a random
 * one on.
 */
export function sessionsOverMemory(options: {
  sessions: ReadonlyMap<string, ProcessFinder>;
  maxBytes: number;
  /** The node's shared places that are a tmpfs. */
  sharedTmpfs: readonly string[];
}): MemoryOverLimit[] {
  const { maxBytes } = options;
  const processes = processesOfSessions(options.sessions);
  // A `user`-mode session's files in the node's tmpfs places and its detached System V segments, every such
  // session's in one reading.
  const uids = new Set([...options.sessions.values()].flatMap((owner) => ("uid" in owner ? [owner.uid] : [])));
  const inTmpfsByUid = uids.size > 0 ? ownedFiles(options.sharedTmpfs, uids) : new Map<number, Map<string, number>>();
  const detachedByUid = uids.size > 0 ? detachedSegments(uids) : new Map<number, Map<number, number>>();
  // What the node's tmpfs files, memfds and shared mappings take together: no session holds more of them.
  const nodeShmem = meminfoBytes("Shmem");
  const over: MemoryOverLimit[] = [];
  for (const [sessionId, owner] of options.sessions) {
    const listed = processes.get(sessionId) ?? [];
    const dirs = fromRandomStart(listed.map((entry) => entry.dir));
    const uid = "uid" in owner ? owner.uid : undefined;
    const inTmpfsFiles = (uid !== undefined && inTmpfsByUid.get(uid)) || new Map<string, number>();
    const detached = (uid !== undefined && detachedByUid.get(uid)) || new Map<number, number>();
    const outside = { inTmpfs: sum(inTmpfsFiles.values()), detached: sum(detached.values()), held: 0, heldFiles: 0 };
    // Resident memory first, read with the processes' status (counters the kernel keeps); it counts each page two
    // processes share in both, so it is never below the proportional figure, which walks every mapping (about a
    // millisecond for a large process) and is read only for a session the cheaper figures put above its limit.
    let resident = listed.reduce((total, entry) => total + entry.residentBytes, outside.inTmpfs + outside.detached);
    // Files with no name that are memory (a memfd written and not mapped): looked for only when the node's
    // shared memory could take the session above its limit.
    let held = new Map<string, number>();
    if (resident + nodeShmem > maxBytes) {
      held = heldMemoryFiles(dirs, { left: MAX_LOOKED_AT_PER_CHECK });
      outside.held = sum(held.values());
      outside.heldFiles = held.size;
      // A segment attached since /proc/sysvipc/shm was read is in `held` (its inode number is its id): once.
      const heldInodes = new Set([...held.keys()].map((key) => key.slice(key.indexOf(":") + 1)));
      for (const [id, bytes] of detached) if (heldInodes.has(String(id))) outside.detached -= bytes;
      resident += outside.held;
    }
    if (resident <= maxBytes) continue;
    // Its files of memory count whole, once: what its processes map of them comes off their proportional figure.
    const files = new Map([...inTmpfsFiles, ...held]);
    const taken = dirs.reduce(
      (total, dir) => total + processMemory(dir, "proportional") - (files.size > 0 ? mappedFromFiles(dir, files) : 0),
      outside.inTmpfs + outside.detached + outside.held,
    );
    if (taken > maxBytes) over.push({ sessionId, bytes: taken, outside });
  }
  return over;
}

/**
 * What the process takes that the node cannot reclaim without ending it, in bytes: its anonymous and shared
 * (shmem) memory and what of it is swapped out, `resident` in full (`<dir>/status`, {@link residentBytes}),
 * `proportional` as its share of each page it shares with other processes (`<dir>/smaps_rollup`; as `resident` where
 * the kernel gives no Pss_Anon, older ones, or where the rollup is closed to this sandbox: a process that made itself
 * undumpable, to a sandbox that is not root). `dir` is the process's /proc directory (ListedProcess.dir). 0 when it
 * is gone.
 */
export function processMemory(dir: string, how: "resident" | "proportional"): number {
  if (how === "proportional") {
    try {
      const rollup = readFileSync(`${dir}/smaps_rollup`, "utf8");
      if (/^Pss_Anon:/m.test(rollup))
        return kibibytes(rollup, "Pss_Anon") + kibibytes(rollup, "Pss_Shmem") + kibibytes(rollup, "SwapPss");
    } catch {
      // closed to this sandbox, or gone: the status's figure, never less
    }
  }
  try {
    return residentBytes(readFileSync(`${dir}/status`, "utf8"));
  } catch {
    return 0; // gone meanwhile
  }
}

/** For each uid, the files and folders it owns beneath `places`, with what each takes (allocated bytes, by `<st_dev>:<st_ino>`). */
function ownedFiles(places: readonly string[], uids: ReadonlySet<number>): Map<number, Map<string, number>> {
  const owned = new Map<number, Map<string, number>>();
  forEachOwnedEntry(places, uids, {
    budget: MAX_WALKED_ENTRIES,
    visit: (stats) => {
      let files = owned.get(stats.uid);
      if (files === undefined) owned.set(stats.uid, (files = new Map()));
      files.set(`${stats.dev}:${stats.ino}`, stats.blocks * 512);
    },
  });
  return owned;
}

function sum(values: Iterable<number>): number {
  let total = 0;
  for (const value of values) total += value;
  return total;
}

/** A /proc/meminfo field in bytes; 0 where it cannot be read. */
function meminfoBytes(field: string): number {
  try {
    return kibibytes(readFileSync("/proc/meminfo", "utf8"), field);
  } catch {
    return 0;
  }
}

/**
 * For each uid, the System V shared memory segments it made that no process has attached, with what each takes by id
 * (resident and swapped out; an attached segment's pages count with the processes mapping it): the node's IPC
 * namespace, which `user`-mode sessions share (a bubblewrap session's is its own, and its segments small:
 * syscall-filter/generate.py). By creator (cuid), which no one can change: a segment's owner may hand it to any uid
 * (IPC_SET), to hide it or to have it counted against another session.
 */
function detachedSegments(uids: ReadonlySet<number>): Map<number, Map<number, number>> {
  const found = new Map<number, Map<number, number>>();
  for (const row of systemVTable("shm")) {
    const creator = Number(row.cuid);
    if (row.nattch !== "0" || !uids.has(creator)) continue;
    let segments = found.get(creator);
    if (segments === undefined) found.set(creator, (segments = new Map()));
    segments.set(Number(row.shmid), Number(row.rss ?? 0) + Number(row.swap ?? 0));
  }
  return found;
}
