// Where a path a model gave a file tool really leads, for a harness that
// keeps its file tools inside the session's working directory: a symlink
// inside it may point anywhere, and a path that does not exist yet (a file
// to write) still has a real place, its nearest existing parent's.
import { realpathSync } from "node:fs";
import path from "node:path";

/**
 * The real path of `target` (absolute): symlinks resolved in the part that
 * exists, the rest appended as written.
 */
export function realTarget(target: string): string {
  const missing: string[] = [];
  let current = target;
  for (;;) {
    try {
      return path.join(realpathSync(current), ...missing.reverse());
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return target;
      missing.push(path.basename(current));
      current = parent;
    }
  }
}
