// Where the filesystem puts sessions' folders. ext4 (the Orlov allocator)
// puts a new folder in its parent's block group, and looks for a free inode
// there from the group's first one; without a journal it steps over every
// inode freed in the last minute (six while its inode table is dirty) to find
// one not reused too soon. Every session makes a dozen folders and removes
// them a second later, all of them in sessions/'s group: at a few sessions a
// second each mkdir stepped over thousands of freed inodes, about half of the
// sandbox's CPU a job on this machine's ext4 (issue 24; `perf`: mkdir 46% of
// the sandbox's samples, in find_inode_bit and recently_deleted). A folder
// marked the top of a directory hierarchy (chattr +T, FS_TOPDIR_FL) has its
// children spread over the groups instead, as the root's are, each in one
// with few folders and enough free inodes; what a session makes below its
// own folder stays in that folder's group. The flag is a placement hint: it
// changes no permission and nothing a session sees; a filesystem without it
// refuses it, and is left as it is.
import { spawnSync } from "node:child_process";
import { systemCommand } from "./system-command.js";

/** FS_TOPDIR_FL (linux/fs.h): "top of directory hierarchies". */
const FS_TOPDIR_FL = 0x20000;

/** FS_IOC_GETFLAGS and FS_IOC_SETFLAGS, _IOR('f', 1, long) and _IOW('f', 2, long), where Node runs 64-bit Linux. */
const FLAGS_IOCTLS: Partial<Record<NodeJS.Architecture, { get: number; set: number }>> = {
  x64: { get: 0x80086601, set: 0x40086602 },
  arm64: { get: 0x80086601, set: 0x40086602 },
  riscv64: { get: 0x80086601, set: 0x40086602 },
  s390x: { get: 0x80086601, set: 0x40086602 },
  loong64: { get: 0x80086601, set: 0x40086602 },
  ppc64: { get: 0x40086601, set: 0x80086602 },
};

/** Sets the flag on each folder (not a link) that lacks it; prints the folders that have it. Node has no ioctl. */
const MARK_TOPDIR = String.raw`
use strict; use Fcntl qw(O_RDONLY O_DIRECTORY O_NOFOLLOW);
my ($get, $set, $flag, @dirs) = @ARGV;
for my $dir (@dirs) {
  sysopen(my $fh, $dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW) or next;
  my $flags = pack("L", 0);
  ioctl($fh, $get, $flags) or next;
  my $now = unpack("L", $flags);
  if (!($now & $flag)) { my $new = pack("L", $now | $flag); ioctl($fh, $set, $new) or next }
  print "$dir\n";
}
`;

/**
 * Marks each of `dirs` the top of a directory hierarchy, so that the filesystem spreads the folders made in it (a
 * session's each) instead of packing them where the last ones were just freed. Returns those marked; none where the
 * filesystem, the architecture or the lack of perl does not allow it. A hint: failing changes nothing else.
 */
export function spreadSubfolders(dirs: readonly string[]): string[] {
  const ioctls = process.platform === "linux" ? FLAGS_IOCTLS[process.arch] : undefined;
  const perl = systemCommand("perl");
  if (ioctls === undefined || perl === undefined || dirs.length === 0) return [];
  const result = spawnSync(
    perl,
    ["-e", MARK_TOPDIR, String(ioctls.get), String(ioctls.set), String(FS_TOPDIR_FL), ...dirs],
    { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"], timeout: 10_000 },
  );
  return result.status === 0 ? result.stdout.split("\n").filter((line) => line !== "") : [];
}
