// A session's directories in the `user` isolation mode: made by the sandbox
// (root), handed over to the session's uid before the harness starts, and
// removed through that uid when the session ends; and what the uid left in
// the node's shared places, removed before the uid is given to the next.
//
// Removal runs as the session's uid because a process of that uid may still
// be alive (a session sharing the working directory): root walking a tree its
// owner can change while root walks it could be led by a swapped symlink to
// delete a node file. As the uid, the worst a swap can do is what the uid
// could do itself. Root then removes only the emptied top directories, whose
// parents root owns.
import { chmodSync, lchownSync, readFileSync } from "node:fs";
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
 * {@link handOver} for a folder the sandbox has just made and that holds nothing but the empty folders `made`, which
 * it made too: the same calls in the same order, children before their folder, without reading the folders back. In
 * the main thread: a change of owner or mode allocates and frees nothing (microseconds), where each step of the walk
 * was a thread-pool round trip, about twenty a session (issue 24).
 */
export function handOverMade(dir: string, made: readonly string[], user: SessionUser): void {
  for (const child of made) lchownSync(child, user.uid, user.gid);
  chmodSync(dir, 0o700);
  lchownSync(dir, user.uid, user.gid);
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

/**
 * The node's places every user may write to, which a session of the `user` mode shares with the node: those of a
 * Debian or Ubuntu system (/run/lock, which /var/lock names, is 1777 there; Ubuntu's /var/crash too). One missing on
 * a node is passed over. Left out, a session's files there outlived it, for a later job to read (attacker review).
 */
export const SHARED_WRITABLE_PLACES: readonly string[] = [
  "/tmp",
  "/var/tmp",
  "/dev/shm",
  "/dev/mqueue",
  "/run/lock",
  "/var/crash",
];

/** The node's System V IPC tables (/proc/sysvipc/<name>) and their columns of the owner's and the creator's uid (for the perl below). */
const SYSTEM_V_TABLES = [
  { name: "shm", owner: 7, creator: 9 },
  { name: "sem", owner: 4, creator: 6 },
  { name: "msg", owner: 7, creator: 9 },
] as const;

/**
 * The rows of /proc/sysvipc/<table> (the sandbox's IPC namespace: the node's, which `user`-mode sessions share), each
 * by the table's column names; none where the kernel has no System V IPC.
 */
export function systemVTable(table: "shm" | "sem" | "msg"): Array<Record<string, string>> {
  let lines: string[];
  try {
    lines = readFileSync(`/proc/sysvipc/${table}`, "utf8").trim().split("\n");
  } catch {
    return [];
  }
  const columns = (lines[0] ?? "").trim().split(/\s+/);
  return lines.slice(1).map((line) => {
    const fields = line.trim().split(/\s+/);
    return Object.fromEntries(columns.map((column, i) => [column, fields[i] ?? ""]));
  });
}

/**
 * The uids of `range` that own or made a System V shared memory segment, semaphore set or message queue on the node:
 * what sessions of a killed sandbox left.
 */
export function uidsWithSystemVObjects(range: { base: number; count: number }): Set<number> {
  const found = new Set<number>();
  for (const { name } of SYSTEM_V_TABLES)
    for (const row of systemVTable(name))
      for (const uid of [Number(row.uid), Number(row.cuid)])
        if (uid >= range.base && uid < range.base + range.count) found.add(uid);
  return found;
}

/**
 * Run as the uid: removes, beneath each folder given (on its filesystem, links not followed, entering only folders
 * the uid owns or may write to: where it could have made something), every file and folder the uid owns, and every System V shared memory segment, semaphore set and message queue it owns or made (perl's
 * shmctl, semctl and msgctl, IPC_RMID being 0 on Linux). Entries of other users are left alone (the kernel would
 * refuse the uid anyway). Exits 0; what it could not remove it names on stderr.
 */
const REMOVE_UID_LEFTOVERS = String.raw`
my ($uid, $gid) = ($<, $( + 0);
# Walked by name, one folder at a time (as tree-removal.ts's REMOVE_CONTENTS): a path built whole fails past PATH_MAX
# (ENAMETOOLONG), and a tree the uid nested deeper than that stayed, for the next session of the uid to read
# (attacker review). Each folder entered is checked to be the one lstat saw, and each return to be the folder left.
# A folder another user swapped or moved meanwhile loses the walk its way: it goes back into the place itself by its
# path (root's: nobody else moves it) and on with the place's next entry, and the place is walked again after (at
# most three times in all). Giving the whole place up instead let another session, moving a folder of its own each
# time the sweep entered it, keep every uid's files in /tmp for the next session of the uid (third review).
my ($lost, $moved);
# Only where the uid could have made something: its own folders, and those every user (or its group) may write.
sub enterable { my @st = @_; $st[4] == $uid || ($st[2] & 0002) || (($st[2] & 0020) && $st[5] == $gid) }
sub sweep {
  my ($shown, $dev, $ino, $place) = @_;
  # The uid's files go as the folder is read, and only the folders to enter are kept: a folder of millions of another
  # user's names (hard links cost no inode) held them all in memory, in every sweep (third review).
  opendir(my $handle, ".") or return;
  my @folders;
  while (defined(my $name = readdir $handle)) {
    next if $name eq "." || $name eq "..";
    my @st = lstat $name or next;
    next if $st[0] != $dev;
    if (-d _) { push @folders, $name if enterable(@st) }
    elsif ($st[4] == $uid) {
      unlink $name or print STDERR "$shown/$name: $!
";
    }
  }
  closedir $handle;
  for my $name (@folders) {
    return if $lost;
    my $entry = "$shown/$name";
    my @st = lstat $name or next;
    if ($st[0] == $dev && -d _ && enterable(@st)) {
      # A folder of its own it closed to itself (0333: no read) is opened again first: else nothing in it went, and
      # it stayed, a drop box for a later session (second review). lstat said a folder: nothing of the uid runs now.
      chmod 0700, $name if $st[4] == $uid;
      if (chdir $name) {
        my @in = stat ".";
        if ($in[0] != $st[0] || $in[1] != $st[1]) { $lost = 1 }
        else { sweep($entry, $st[0], $st[1]) }
        if (!$lost) {
          my @back = (chdir "..") ? stat "." : ();
          $lost = 1 if !@back || $back[0] != $dev || $back[1] != $ino;
        }
        if ($lost) {
          return unless defined $place;
          ($lost, $moved) = (0, 1);
          my @back = (chdir $place) ? stat "." : ();
          if (!@back || $back[0] != $dev || $back[1] != $ino) { $lost = 1; return }
          next;
        }
      }
      rmdir $name or print STDERR "$entry: $!
" if $st[4] == $uid;
    }
  }
}
for my $top (@ARGV) {
  for my $try (1 .. 3) {
    ($lost, $moved) = (0, 0);
    my @st = lstat $top or last;
    last unless -d _;
    chdir $top or last;
    my @in = stat ".";
    $lost = 1, next if $in[0] != $st[0] || $in[1] != $st[1];
    sweep($top, $st[0], $st[1], $top);
    chdir "/";
    last unless $lost || $moved;
  }
  print STDERR "$top: folders in it moved while it was swept\n" if $lost || $moved;
}
for my $kind (${SYSTEM_V_TABLES.map(({ name, owner, creator }) => `["${name}", ${owner}, ${creator}]`).join(", ")}) {
  my ($name, $owner, $creator) = @$kind;
  open(my $table, "<", "/proc/sysvipc/$name") or next;
  <$table>;
  for (<$table>) {
    my @f = split;
    next unless $f[$owner] == $uid || $f[$creator] == $uid;
    my $removed = $name eq "shm" ? shmctl($f[1], 0, 0) : $name eq "sem" ? semctl($f[1], 0, 0, 0) : msgctl($f[1], 0, 0);
    print STDERR "System V $name $f[1]: $!\n" unless defined $removed;
  }
}
`;

/**
 * Removes what the uid left in the node's shared places: its files and folders in `places` (default
 * {@link SHARED_WRITABLE_PLACES}), its System V shared memory, semaphores and message queues. Run once nothing of
 * the uid runs: a session ended, or a uid taken that a killed sandbox's session left. Never rejects: resolves with
 * what could not be removed, for the caller's log.
 */
export async function removeUidLeftovers(
  user: SessionUser,
  places: readonly string[] = SHARED_WRITABLE_PLACES,
): Promise<string | undefined> {
  try {
    const { status, stderr } = await runAsSessionUser({ user, script: REMOVE_UID_LEFTOVERS, args: places });
    return status === 0 && stderr === "" ? undefined : stderr || `status ${status}`;
  } catch (error) {
    return (error as Error).message;
  }
}
