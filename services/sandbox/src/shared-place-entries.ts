// What the uids of `user`-mode sessions own in the node's shared places
// (session-user-files.ts, SHARED_WRITABLE_PLACES) that are a tmpfs: files
// there are memory no process is charged for (session-memory-guard.ts), and
// each entry, an empty file too, takes one of the tmpfs's inodes, which every
// user of the node shares (shared-tmpfs-guard.ts). Read on the guards' thread
// (guard-readings.ts).
import { lstatSync, readdirSync, statfsSync, type Stats } from "node:fs";
import path from "node:path";
import { isMemoryFilesystem } from "./held-memory-files.js";
import { SHARED_WRITABLE_PLACES } from "./session-user-files.js";

/** The node's shared places that are a tmpfs (/dev/shm everywhere; /tmp and /run/lock where they are one). */
export function sharedTmpfsPlaces(): string[] {
  return SHARED_WRITABLE_PLACES.filter((place) => {
    try {
      return isMemoryFilesystem(statfsSync(place).type);
    } catch {
      return false; // not on this node
    }
  });
}

/**
 * Calls `visit` with each file and folder one of `uids` owns beneath `places`, each place walked on its own
 * filesystem, links not followed, entering only folders one of the uids owns or may write to (every user's, or its
 * group's: a session's gid is its uid), where it could have made something (as session-user-files.ts removes them).
 * Stops after `budget` entries looked at (what lies past it is not visited): a session decides how many there are.
 */
export function forEachOwnedEntry(
  places: readonly string[],
  uids: ReadonlySet<number>,
  options: { budget: number; visit: (stats: Stats) => void },
): void {
  let budget = options.budget;
  const walk = (at: string, device: number): void => {
    if (budget <= 0) return;
    let names: string[];
    try {
      names = readdirSync(at);
    } catch {
      return; // gone, or not the sandbox's to read
    }
    for (const name of names) {
      if (budget-- <= 0) return;
      const entry = path.join(at, name);
      let stats: Stats;
      try {
        stats = lstatSync(entry);
      } catch {
        continue; // gone meanwhile
      }
      if (stats.dev !== device) continue;
      if (uids.has(stats.uid)) options.visit(stats);
      const reachable =
        uids.has(stats.uid) || (stats.mode & 0o002) !== 0 || ((stats.mode & 0o020) !== 0 && uids.has(stats.gid));
      if (stats.isDirectory() && reachable) walk(entry, device);
    }
  };
  for (const place of places) {
    try {
      walk(place, lstatSync(place).dev);
    } catch {
      // not on this node
    }
  }
}

/** How many entries each of `uids` owns in `place` (a reading of the guards' thread), looking at `budget` at most. */
export function entriesByUid(input: { place: string; uids: readonly number[]; budget: number }): Map<number, number> {
  const counts = new Map<number, number>();
  forEachOwnedEntry([input.place], new Set(input.uids), {
    budget: input.budget,
    visit: (stats) => void counts.set(stats.uid, (counts.get(stats.uid) ?? 0) + 1),
  });
  return counts;
}
