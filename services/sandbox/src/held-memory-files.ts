// Memory a session holds as files with no name: a memfd (memfd_create), a file of a tmpfs it deleted while it kept
// it open or mapped, a shared anonymous mapping's pages. Such a file is memory the node cannot reclaim while one
// descriptor or mapping of it is left, and no process is charged for what of it is not mapped: a process that
// writes a gigabyte into a memfd and keeps only its descriptor has a resident size of a few megabytes. The memory
// guard (session-memory-guard.ts) adds each such file once, whole, to what the session's processes take, in place
// of their share of the pages of it they map (which the kernel's figures count).
//
// The files are found as the disk guard finds the deleted files a session holds (held-deleted-files.ts): through
// each descriptor, and each mapping the kernel marks deleted where the sandbox may open /proc/<pid>/map_files
// (root). Not seen: where the sandbox is not root, a file kept only mapped, its descriptors closed, counts as the
// pages of it the session's processes map (which madvise can drop while the file keeps them); a descriptor in
// flight in a socket's queue, which no process holds; what lies past a check's budget of descriptors (a process
// holding more than that can keep one out of a check's sight, though not at the same place in every check).
import { readFileSync, statfsSync } from "node:fs";
import { deletedFilesOf, type LookBudget } from "./held-deleted-files.js";
import { kibibytes } from "./process-list.js";

/** statfs's f_type of the filesystems whose files are memory (linux/magic.h): tmpfs (memfd's too), hugetlbfs, ramfs. */
const MEMORY_FILESYSTEMS = new Set([0x01021994, 0x958458f6, 0x858458f6]);

/** Whether a filesystem of statfs's `type` keeps its files in memory. */
export function isMemoryFilesystem(type: number): boolean {
  return MEMORY_FILESYSTEMS.has(type);
}

/**
 * The memory-backed files with no name the processes hold: allocated bytes by `<st_dev>:<st_ino>`, each file once;
 * looking at no more descriptors and mappings than `budget` has left.
 */
export function heldMemoryFiles(dirs: Iterable<string>, budget: LookBudget): Map<string, number> {
  const files = new Map<string, number>();
  const memoryDevices = new Map<number, boolean>();
  for (const dir of dirs)
    for (const { stats, link } of deletedFilesOf(dir, budget)) {
      const key = `${stats.dev}:${stats.ino}`;
      if (files.has(key)) continue;
      let memory = memoryDevices.get(stats.dev);
      if (memory === undefined) {
        try {
          memory = isMemoryFilesystem(statfsSync(link).type);
        } catch {
          continue; // closed meanwhile: asked again through the next link of that filesystem
        }
        memoryDevices.set(stats.dev, memory);
      }
      if (memory && stats.blocks > 0) files.set(key, stats.blocks * 512);
    }
  return files;
}

/**
 * What of the process's proportional figure (smaps_rollup's Pss_Shmem) comes from its mappings of the
 * `files` (by `<st_dev>:<st_ino>`), in bytes: what the guard takes off before it adds those files whole. 0 when it
 * is gone or closed.
 */
export function mappedFromFiles(dir: string, files: ReadonlyMap<string, number>): number {
  let smaps: string;
  try {
    // maps first (a tenth of smaps' cost): most processes map none of the files.
    const maps = readFileSync(`${dir}/maps`, "utf8");
    const mapsOne = [...maps.matchAll(/^\S+ \S+ \S+ ([0-9a-f]+):([0-9a-f]+) (\d+)/gm)].some(([, major, minor, inode]) =>
      files.has(fileKey(major!, minor!, inode!)),
    );
    if (!mapsOne) return 0;
    smaps = readFileSync(`${dir}/smaps`, "utf8");
  } catch {
    return 0;
  }
  let total = 0;
  // Each mapping: "start-end perms offset major:minor inode path", then its "Field: n kB" lines.
  for (const mapping of smaps.matchAll(
    /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ ([0-9a-f]+):([0-9a-f]+) (\d+) [^\n]*\n((?:[A-Z][^\n]*\n)*)/gm,
  )) {
    const [, major, minor, inode, fields] = mapping;
    if (!files.has(fileKey(major!, minor!, inode!))) continue;
    // A private mapping's pages the process wrote are its own (anonymous): they stay in its figure, swapped out or
    // not (a shared mapping's pages swapped out are the file's, never in SwapPss).
    total += Math.max(0, kibibytes(fields!, "Pss") - kibibytes(fields!, "Anonymous"));
  }
  return total;
}

/** The `<st_dev>:<st_ino>` key of a mapping's file, from the hexadecimal major and minor and the inode maps gives. */
function fileKey(major: string, minor: string, inode: string): string {
  return `${deviceNumber(parseInt(major, 16), parseInt(minor, 16))}:${inode}`;
}

/** st_dev as glibc's makedev encodes a device's major and minor numbers (what Node's stat gives). */
function deviceNumber(major: number, minor: number): number {
  // (major & 0xfff) << 8 | (major & 0xfffff000) << 32 | (minor & 0xff) | (minor & 0xffffff00) << 12, in doubles.
  return (
    (major & 0xfff) * 2 ** 8 + (major - (major & 0xfff)) * 2 ** 32 + (minor & 0xff) + (minor - (minor & 0xff)) * 2 ** 12
  );
}
