// Removing a session's tree whatever it made of it: deeper than PATH_MAX
// (Node's rm, walking full paths, fails with ENAMETOOLONG and leaves it), or
// with folders it closed (chmod 000, which stops a sandbox that is not root).
// A tree left behind stays on the node's disk for good, and the disk guard
// then refuses sessions for it (session-disk-guard.ts). Perl walks it by
// name, one folder at a time, as the `user` mode's helper does as the uid
// (session-user-files.ts); perl-base is essential on Debian.
import { spawn } from "node:child_process";
import { rm, rmdir } from "node:fs/promises";
import { systemCommand } from "./system-command.js";

/**
 * Empties each directory of @ARGV, keeping the directory itself: each
 * directory of the tree is made enterable and changeable by whoever runs it
 * (its owner: the session's uid, or the sandbox's own user), entered by name
 * (so no path grows past PATH_MAX, however deep the tree), emptied, left and
 * removed; links are removed, never followed. Run as the uid, a swap
 * meanwhile can only lead it to what the uid could remove itself.
 */
export const REMOVE_CONTENTS = String.raw`
sub empty_here {
  opendir(my $h, ".") or return; my @names = grep { $_ ne "." && $_ ne ".." } readdir $h; closedir $h;
  for my $name (@names) {
    lstat $name;
    if (!-d _) { unlink $name; next }
    chmod 0700, $name;
    if (chdir $name) { empty_here(); chdir ".." or die "oz0 helper: cannot leave $name: $!\n" }
    rmdir $name;
  }
}
for my $dir (@ARGV) { chmod 0700, $dir; chdir $dir and empty_here(); chdir "/" }
`;

/**
 * Removes `dir` and all beneath it as this process's user, for a tree `rm -r` could not remove. Only once nothing of
 * the session runs any more: a walk by name follows a folder swapped for a link between its lstat and its chdir.
 */
export async function removeTree(dir: string): Promise<void> {
  const perl = systemCommand("perl");
  if (perl === undefined) throw new Error(`no perl in /usr/bin or /bin to remove ${dir}: install perl-base`);
  await new Promise<void>((resolve, reject) => {
    let stderr = "";
    const child = spawn(perl, ["-e", REMOVE_CONTENTS, dir], { stdio: ["ignore", "ignore", "pipe"], env: {} });
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => (stderr += chunk));
    child.on("error", reject);
    child.on("close", (code, signal) =>
      code === 0
        ? resolve()
        : reject(new Error(`could not remove ${dir}: ${stderr.trim() || `exit ${code ?? signal}`}`)),
    );
  });
  await rmdir(dir);
}

/** `rm -r` of `dir` (gone already is fine), or the walk by name where that fails (a tree deeper than PATH_MAX, a closed folder). */
export async function removeSessionTree(dir: string): Promise<void> {
  try {
    await rm(dir, { recursive: true, force: true, maxRetries: 2 });
  } catch {
    await removeTree(dir);
  }
}
