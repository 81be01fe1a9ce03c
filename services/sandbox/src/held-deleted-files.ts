// What a session holds on the node's disk that its directories do not show: files it deleted while they were still
// open or mapped. Such a file keeps its blocks for as long as one descriptor or mapping of it is left, and grows as
// it is written, so a session that opens a file, deletes it and writes on fills the disk out of du's sight
// (session-disk-guard.ts adds this to what its directories hold).
//
// Each session's processes are found in /proc: those of its uid (the `user` mode), or every process below its
// harness's first one (under bubblewrap its PID namespace, whose orphans go to the namespace's init, below it; in
// the `none` mode under the `subreaper` wrapper), or those its container lists (its cgroup in the `none` mode). A
// file is counted when it is a regular file with no name left (nlink 0) on the disk being guarded: through each
// descriptor in /proc/<pid>/fd, and each mapping /proc/<pid>/maps marks deleted, through /proc/<pid>/map_files,
// which the kernel opens only to a sandbox holding CAP_SYS_ADMIN (root); elsewhere a file a session keeps only
// mapped, its descriptors closed, is not seen. The memory guard reads the same for the files with no name that are
// memory (session-memory-guard.ts): a memfd, a deleted file of a tmpfs.
import { readdirSync, readFileSync, statSync, type Stats } from "node:fs";
import { processesOfSessions, type ProcessFinder } from "./process-list.js";
import type { Usage } from "./session-disk-guard.js";

/**
 * For each session (by key), what the files its processes hold deleted on the filesystem `device` take: allocated
 * bytes and inodes, each file once; looking at no more than `budget` descriptors and mappings of each session (one
 * holding a million cannot keep another's out of sight). Sessions whose processes are gone, or unreadable, hold
 * nothing.
 */
export function heldDeletedFiles(options: {
  /** st_dev of the guarded filesystem: deleted files elsewhere (a tmpfs, memfd) do not count. */
  device: number;
  sessions: ReadonlyMap<string, ProcessFinder>;
  budget: number;
}): Map<string, Usage> {
  const held = new Map<string, Usage>();
  for (const [key, processes] of processesOfSessions(options.sessions)) {
    const files = new Map<number, number>();
    const budget = { left: options.budget };
    for (const { dir } of fromRandomStart(processes)) {
      for (const { stats } of deletedFilesOf(dir, budget))
        if (stats.dev === options.device) files.set(stats.ino, stats.blocks);
    }
    let bytes = 0;
    for (const blocks of files.values()) bytes += blocks * 512;
    held.set(key, { bytes, files: files.size });
  }
  return held;
}

/** A deleted regular file a process holds: what stat says of it, and the /proc link that reaches it. */
export interface HeldFile {
  readonly stats: Stats;
  /** /proc/<pid>/fd/<n> or /proc/<pid>/map_files/<range>: statfs through it names the file's filesystem. */
  readonly link: string;
}

/** How many descriptors and deleted mappings a caller may still look at (each a stat, some microseconds). */
export interface LookBudget {
  left: number;
}

/**
 * What one check of a guard looks at of each session, at most: a session may hold a million descriptors, and a check
 * must end in time for the next (guard-readings.ts runs it on a thread of its own, so what it costs is the guards'
 * delay). Each session has a budget of its own: one holding more cannot keep another's files out of sight.
 */
export const MAX_LOOKED_AT_PER_CHECK = 5_000;

/**
 * The items from a random one on, wrapping round: what comes first spends a budget first, and no process may keep a
 * file past it check after check by its place.
 */
export function fromRandomStart<T>(items: readonly T[]): T[] {
  const first = Math.floor(Math.random() * items.length);
  return [...items.slice(first), ...items.slice(0, first)];
}

/**
 * The deleted regular files the process holds open or mapped (a file held both ways comes twice); none when it is
 * gone or closed to this sandbox. With a `budget`, each descriptor and deleted mapping looked at spends one, and
 * none is looked at once it is spent; the descriptors are then taken from a random one on (wrapping round), so a
 * process cannot keep a file past the budget at the same place check after check.
 */
export function* deletedFilesOf(dir: string, budget?: LookBudget): Generator<HeldFile> {
  const deleted = (file: string): Stats | undefined => {
    try {
      // stat follows the magic link to the file itself, named or not.
      const stats = statSync(file);
      return stats.isFile() && stats.nlink === 0 ? stats : undefined;
    } catch {
      return undefined; // closed meanwhile, or not this sandbox's to read
    }
  };
  const fds = entriesOf(`${dir}/fd`);
  const first = budget === undefined ? 0 : Math.floor(Math.random() * fds.length);
  for (let i = 0; i < fds.length; i++) {
    if (budget !== undefined && budget.left-- <= 0) return;
    const link = `${dir}/fd/${fds[(first + i) % fds.length]}`;
    const stats = deleted(link);
    if (stats !== undefined) yield { stats, link };
  }
  let maps: string;
  try {
    maps = readFileSync(`${dir}/maps`, "utf8");
  } catch {
    return;
  }
  // "start-end perms offset dev inode path (deleted)": map_files names a mapping by its range, without the 0x.
  for (const match of maps.matchAll(/^([0-9a-f]+-[0-9a-f]+) \S+ \S+ \S+ [1-9]\d* .* \(deleted\)$/gm)) {
    if (budget !== undefined && budget.left-- <= 0) return;
    const link = `${dir}/map_files/${match[1]}`;
    const stats = deleted(link);
    if (stats !== undefined) yield { stats, link };
  }
}

function entriesOf(directory: string): string[] {
  try {
    return readdirSync(directory);
  } catch {
    return [];
  }
}
