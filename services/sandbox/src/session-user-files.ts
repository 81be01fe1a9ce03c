// A session's directories in the `user` isolation mode: made by the sandbox
// (root), handed over to the session's uid before the harness starts, and
// removed through that uid when the session ends.
//
// Removal runs as the session's uid because a process of that uid may still
// be alive (a session sharing the working directory): root walking a tree its
// owner can change while root walks it could be led by a swapped symlink to
// delete a node file. As the uid, the worst a swap can do is what the uid
// could do itself. Root then removes only the emptied top directories, whose
// parents root owns.
import { chmod, lchown, readdir, rmdir } from "node:fs/promises";
import path from "node:path";
import { runAsSessionUser } from "./session-user-helper.js";
import { REMOVE_CONTENTS } from "./tree-removal.js";
import type { SessionUser } from "./session-user-processes.js";

/**
 * Makes `dir` and everything in it the user's (symlinks themselves, never their targets), and `dir` private to it.
 * Children before their folder: a folder becomes the uid's only once all it holds is, so a process of the uid
 * already running (left by a killed sandbox, before the session's keeper ends it) cannot swap an entry the walk
 * has yet to reach for a link, and have root give it a node file.
 */
export async function handOver(dir: string, user: SessionUser): Promise<void> {
  const walk = async (current: string): Promise<void> => {
    for (const entry of await readdir(current, { withFileTypes: true })) {
      const child = path.join(current, entry.name);
      if (entry.isDirectory()) await walk(child);
      else await lchown(child, user.uid, user.gid);
    }
    if (current === dir) await chmod(dir, 0o700);
    await lchown(current, user.uid, user.gid);
  };
  await walk(dir);
}

/**
 * Removes the directories' contents as the user, then the directories
 * themselves. Throws when something is left (a process of the uid still
 * writing); the caller logs it, and the next start of the sandbox removes it.
 */
export async function removeAsUser(dirs: readonly string[], user: SessionUser): Promise<void> {
  if (dirs.length === 0) return;
  // As the uid, but never ptrace-able by its processes (session-user-helper.ts). The top directories themselves stay
  // (their parents are root's), for root to remove next.
  const { status, stderr } = await runAsSessionUser({ user, script: REMOVE_CONTENTS, args: dirs });
  if (status !== 0)
    throw new Error(`could not remove the session's files as uid ${user.uid}: ${stderr || `status ${status}`}`);
  for (const dir of dirs) await rmdir(dir);
}
