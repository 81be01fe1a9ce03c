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
import { execFile } from "node:child_process";
import { chmod, lchown, readdir, rmdir } from "node:fs/promises";
import path from "node:path";
import type { SessionUser } from "./session-user-processes.js";

/** Makes `dir` and everything in it the user's (symlinks themselves, never their targets), and `dir` private to it. */
export async function handOver(dir: string, user: SessionUser): Promise<void> {
  const walk = async (current: string): Promise<void> => {
    await lchown(current, user.uid, user.gid);
    for (const entry of await readdir(current, { withFileTypes: true })) {
      const child = path.join(current, entry.name);
      if (entry.isDirectory()) await walk(child);
      else await lchown(child, user.uid, user.gid);
    }
  };
  await walk(dir);
  await chmod(dir, 0o700);
}

/**
 * Removes the directories' contents as the user, then the directories
 * themselves. Throws when something is left (a process of the uid still
 * writing); the caller logs it, and the next start of the sandbox removes it.
 */
export async function removeAsUser(dirs: readonly string[], user: SessionUser): Promise<void> {
  if (dirs.length === 0) return;
  await new Promise<void>((resolve) => {
    // The uid owns everything inside, so it can always make it writable
    // first; `rm` then fails only on the top directories themselves (their
    // parents are root's), which root removes next.
    execFile(
      "/bin/sh",
      ["-c", 'chmod -R u+rwx -- "$@" 2>/dev/null; rm -rf -- "$@" 2>/dev/null', "sh", ...dirs],
      { uid: user.uid, gid: user.gid, env: { PATH: "/usr/bin:/bin" }, cwd: "/" },
      () => resolve(),
    );
  });
  for (const dir of dirs) await rmdir(dir);
}
