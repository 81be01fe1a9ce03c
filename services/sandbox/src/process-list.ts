// The processes this sandbox's /proc shows, those of the sessions' PID namespaces among them: read for the session
// uids still in use (session-user-processes.ts), and each session's, for the files they hold deleted
// (held-deleted-files.ts) and the memory they take (session-memory-guard.ts).
import { readdirSync, readFileSync } from "node:fs";

export interface ListedProcess {
  readonly pid: number;
  /**
   * Where /proc shows it: /proc/<pid>, or, when its first thread has exited and others run on (a zombie leader, whose
   * own entries show no memory and no descriptors), /proc/<pid>/task/<tid> of one that runs.
   */
  readonly dir: string;
  /** Real uid. */
  readonly uid: number;
  /** The parent's pid, as this sandbox's PID namespace numbers it (0 for a namespace's init seen from inside). */
  readonly parent: number;
  /** Its resident anonymous and shared memory and its swap, in bytes ({@link residentBytes}). */
  readonly residentBytes: number;
  /** The slots of its descriptor table (FDSize): never fewer than the descriptors it holds open. */
  readonly descriptorSlots: number;
}

/**
 * What a process's /proc/<pid>/status says it holds that the node cannot reclaim without ending it, in bytes: its
 * resident anonymous and shared (shmem) memory and its swap, each page it shares with another process counted in
 * both (counters the kernel keeps: reading them costs microseconds).
 */
export function residentBytes(status: string): number {
  return kibibytes(status, "RssAnon") + kibibytes(status, "RssShmem") + kibibytes(status, "VmSwap");
}

/** A "<field>: <n> kB" line's value in bytes; 0 when there is none. */
export function kibibytes(text: string, field: string): number {
  const value = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(text)?.[1];
  return value === undefined ? 0 : Number(value) * 1024;
}

/** Every living process (zombies aside), each status read once; none when /proc cannot be read. */
export function listProcesses(): ListedProcess[] {
  let names: string[];
  try {
    names = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return [];
  }
  const listed: ListedProcess[] = [];
  for (const name of names) {
    let status: string;
    try {
      status = readFileSync(`/proc/${name}/status`, "utf8");
    } catch {
      continue; // gone meanwhile
    }
    let dir = `/proc/${name}`;
    let counters = status;
    if (/^State:\s+[ZX]/m.test(status)) {
      // A leader that called exit(2) alone is a zombie while its other threads run on, with their memory and
      // descriptors: read from one of them (skipped, it hid all of that, and under bubblewrap every process below it).
      const live = Number(/^Threads:\s+(\d+)/m.exec(status)?.[1] ?? 0) > 1 ? liveThread(name) : undefined;
      if (live === undefined) continue;
      ({ dir, status: counters } = live);
    }
    listed.push({
      pid: Number(name),
      dir,
      uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? NaN),
      parent: Number(/^PPid:\s+(\d+)/m.exec(status)?.[1] ?? NaN),
      residentBytes: residentBytes(counters),
      descriptorSlots: Number(/^FDSize:\s+(\d+)/m.exec(counters)?.[1] ?? 0),
    });
  }
  return listed;
}

/** A thread of the process that has not exited: its /proc directory and status. */
function liveThread(pid: string): { dir: string; status: string } | undefined {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return undefined;
  }
  for (const tid of tids) {
    if (tid === pid) continue;
    const dir = `/proc/${pid}/task/${tid}`;
    try {
      const status = readFileSync(`${dir}/status`, "utf8");
      if (!/^State:\s+[ZX]/m.test(status)) return { dir, status };
    } catch {
      // gone meanwhile
    }
  }
  return undefined;
}

/** How a session's processes are found: those of its uid, every process below the given one, or as listed. */
export type SessionProcesses =
  { readonly uid: number } | { readonly below: number } | { readonly list: () => readonly number[] };

/** The same, with the list taken now: what a thread reading /proc for the guards is given (guard-readings.ts). */
export type ProcessFinder =
  { readonly uid: number } | { readonly below: number } | { readonly pids: readonly number[] };

export function finderNow(processes: SessionProcesses): ProcessFinder {
  return "list" in processes ? { pids: [...processes.list()] } : processes;
}

/** The running sessions whose processes can be found, by id, with how to find them now (for the guards' thread). */
export function runningSessions<
  S extends { readonly id: string; readonly running: boolean; readonly processes?: SessionProcesses | undefined },
>(sessions: Iterable<S>): { running: Map<string, S>; finders: Map<string, ProcessFinder> } {
  const running = new Map<string, S>();
  const finders = new Map<string, ProcessFinder>();
  for (const session of sessions) {
    if (!session.running || session.processes === undefined) continue;
    running.set(session.id, session);
    finders.set(session.id, finderNow(session.processes));
  }
  return { running, finders };
}

/** Each session's living processes now (by key), from one reading of /proc. */
export function processesOfSessions(sessions: ReadonlyMap<string, ProcessFinder>): Map<string, ListedProcess[]> {
  const processes = listProcesses();
  const byPid = new Map(processes.map((entry) => [entry.pid, entry]));
  const children = new Map<number, ListedProcess[]>();
  for (const entry of processes) {
    const siblings = children.get(entry.parent);
    if (siblings === undefined) children.set(entry.parent, [entry]);
    else siblings.push(entry);
  }
  const below = (root: number): ListedProcess[] => {
    const found: ListedProcess[] = [];
    const queue = [byPid.get(root)].filter((entry) => entry !== undefined);
    // A pid is visited once: a reused pid cannot make a cycle of the parents read at different moments.
    const seen = new Set<number>();
    while (queue.length > 0) {
      const entry = queue.pop()!;
      if (seen.has(entry.pid)) continue;
      seen.add(entry.pid);
      found.push(entry);
      queue.push(...(children.get(entry.pid) ?? []));
    }
    return found;
  };
  const found = new Map<string, ListedProcess[]>();
  for (const [key, owner] of sessions)
    found.set(
      key,
      "uid" in owner
        ? processes.filter((p) => p.uid === owner.uid)
        : "below" in owner
          ? below(owner.below)
          : owner.pids.map((pid) => byPid.get(pid)).filter((entry) => entry !== undefined),
    );
  return found;
}
