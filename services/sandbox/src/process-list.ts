// The processes this sandbox's /proc shows, those of the sessions' PID namespaces among them: read for the session
// uids still in use (session-user-processes.ts), and each session's, for the files they hold deleted
// (held-deleted-files.ts) and the memory they take (session-memory-guard.ts).
import { readdirSync, readFileSync } from "node:fs";

export interface ListedProcess {
  readonly pid: number;
  /** Real uid. */
  readonly uid: number;
  /** The parent's pid, as this sandbox's PID namespace numbers it (0 for a namespace's init seen from inside). */
  readonly parent: number;
  /** How many PID namespaces deep it runs (NSpid's count): one more than this sandbox's for a bubblewrap session's. */
  readonly pidNamespaceDepth: number;
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
    if (/^State:\s+[ZX]/m.test(status)) continue;
    listed.push({
      pid: Number(name),
      uid: Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? NaN),
      parent: Number(/^PPid:\s+(\d+)/m.exec(status)?.[1] ?? NaN),
      pidNamespaceDepth: /^NSpid:\s*(.*)$/m.exec(status)?.[1]?.split(/\s+/).length ?? 1,
    });
  }
  return listed;
}

/** How many PID namespaces deep this sandbox runs. */
export function ownPidNamespaceDepth(): number {
  return /^NSpid:\s*(.*)$/m.exec(readFileSync("/proc/self/status", "utf8"))?.[1]?.split(/\s+/).length ?? 1;
}

/** How a session's processes are found: those of its uid, every process below the given one, or as listed. */
export type SessionProcesses =
  { readonly uid: number } | { readonly below: number } | { readonly list: () => readonly number[] };

/** Each session's processes now (by key), from one reading of /proc. */
export function processesOfSessions(sessions: ReadonlyMap<string, SessionProcesses>): Map<string, number[]> {
  const processes = listProcesses();
  const children = new Map<number, number[]>();
  for (const entry of processes) {
    const siblings = children.get(entry.parent);
    if (siblings === undefined) children.set(entry.parent, [entry.pid]);
    else siblings.push(entry.pid);
  }
  const below = (root: number): number[] => {
    const found: number[] = [];
    const queue = [root];
    // A pid is visited once: a reused pid cannot make a cycle of the parents read at different moments.
    const seen = new Set<number>();
    while (queue.length > 0) {
      const pid = queue.pop()!;
      if (seen.has(pid)) continue;
      seen.add(pid);
      found.push(pid);
      queue.push(...(children.get(pid) ?? []));
    }
    return found;
  };
  const found = new Map<string, number[]>();
  for (const [key, owner] of sessions)
    found.set(
      key,
      "uid" in owner
        ? processes.filter((p) => p.uid === owner.uid).map((p) => p.pid)
        : "below" in owner
          ? below(owner.below)
          : [...owner.list()],
    );
  return found;
}
