// The processes this sandbox's /proc shows, those of the sessions' PID namespaces among them: read for the session
// uids still in use (session-user-processes.ts) and for the files sessions hold deleted (held-deleted-files.ts).
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
