// What a bubblewrap session may hold of the kernel's per-user counts that its
// user namespace shares with every other session's: inotify instances and
// watches, fanotify groups and marks.
//
// The kernel charges each to the user in the process's user namespace and,
// level by level, to the user that made each namespace up to the node's: where
// the sandbox is not root (the Kubernetes manifests), bwrap makes every
// session's namespace as the sandbox's user, so all sessions draw from that
// user's counts on the node (fs.inotify.max_user_instances: 128 by default),
// shared with every other process of that user (attacker review: one session
// took all 128 and no other session could watch a file; in a pod of its own
// user namespace, the node's root's count, shared with the kubelet). A root
// sandbox's sessions have uids of their own and draw from their own counts.
//
// Each namespace has a ceiling of its own for each count
// (/proc/sys/user/max_inotify_instances and the like), which its owner may
// lower: after bwrap made the namespace, a perl run as the sandbox's user
// joins it (setns; the sandbox's user owns it, so it holds every capability
// in it) and writes the session's share, half of the node's count over
// OZ0_MAX_SESSIONS, at least a floor. Meanwhile the session's first command,
// a shell, waits until it reads the share before anything of the session
// runs; nothing inside the session can change it (no capability there).
import { execFile, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { LINUX_SYSCALLS } from "@oz0/harness/host";
import { systemCommand } from "./system-command.js";

/** A session's share of each count, written in this order; the gate waits for the last. */
export interface SessionNamespaceLimits {
  perlPath: string;
  setns: number;
  /** Each count's name under /proc/sys/user, and the session's share. */
  shares: readonly (readonly [name: string, share: number])[];
}

/** Each count: its name in a namespace, the node's limit's file, and the least a session gets. */
const COUNTS = [
  { name: "max_inotify_instances", node: "/proc/sys/fs/inotify/max_user_instances", floor: 16 },
  { name: "max_inotify_watches", node: "/proc/sys/fs/inotify/max_user_watches", floor: 8192 },
  { name: "max_fanotify_groups", node: "/proc/sys/fs/fanotify/max_user_groups", floor: 16 },
  { name: "max_fanotify_marks", node: "/proc/sys/fs/fanotify/max_user_marks", floor: 8192 },
] as const;

/** A namespace's ceiling until its owner lowers it: no ceiling. */
const UNLIMITED = 2 ** 31 - 1;

/** How long the session's first command waits for its shares: 2,000 reads some 5 ms apart. */
const GATE_READS = 2000;

/**
 * A count whose floor, times OZ0_MAX_SESSIONS, is more than half of the node's limit: sessions together may take
 * more than the half meant for them, or all of it (the prod overlay's 16 sessions and the default 128 inotify
 * instances: eight sessions take the 128, and the ninth gets none), and the node's limit must be raised to `needed`
 * to keep half for the sandbox's user (the node's root, in a pod of its own user namespace).
 */
export interface OvercommittedCount {
  /** The node's setting, as sysctl names it (fs.inotify.max_user_instances). */
  sysctl: string;
  node: number;
  share: number;
  needed: number;
}

export type NamespaceLimitsChoice =
  | { limits: SessionNamespaceLimits; overcommitted: OvercommittedCount[]; reason?: undefined }
  | { limits?: undefined; reason: string };

/**
 * Each count's share: half of the node's limit over `maxSessions`, at least the count's floor (what a harness needs
 * to run) and at most the node's limit; `overcommitted` names the counts where the floor gives sessions together
 * more than half of the node's limit.
 */
export function sessionShares(
  nodeLimits: ReadonlyMap<string, number>,
  maxSessions: number,
): { shares: [string, number][]; overcommitted: OvercommittedCount[] } {
  const shares: [string, number][] = [];
  const overcommitted: OvercommittedCount[] = [];
  for (const count of COUNTS) {
    const node = nodeLimits.get(count.name);
    if (node === undefined || !(node > 0) || node >= UNLIMITED) continue;
    const share = Math.min(node, Math.max(count.floor, Math.floor(node / (2 * maxSessions))));
    shares.push([count.name, share]);
    if (share * maxSessions * 2 > node)
      overcommitted.push({
        sysctl: count.node.slice("/proc/sys/".length).replaceAll("/", "."),
        node,
        share,
        needed: share * maxSessions * 2,
      });
  }
  return { shares, overcommitted };
}

/**
 * The shares for sessions in user namespaces of the sandbox's user, or why there are none: tried once here, in a user
 * namespace of this process's own, as each session's will be written.
 */
export function chooseNamespaceLimits(options: { maxSessions: number }): NamespaceLimitsChoice {
  if (process.platform !== "linux") return { reason: `Linux's (this is ${process.platform})` };
  const syscalls = LINUX_SYSCALLS[process.arch];
  if (syscalls === undefined) return { reason: `setns's syscall number is not known for ${process.arch}` };
  const perlPath = systemCommand("perl");
  if (perlPath === undefined) return { reason: "no perl in /usr/bin or /bin (Debian's perl-base)" };
  const nodeLimits = new Map<string, number>();
  for (const count of COUNTS) {
    try {
      nodeLimits.set(count.name, Number(readFileSync(count.node, "utf8").trim()));
    } catch {
      // A kernel without this count (fanotify before Linux 5.13).
    }
  }
  const { shares, overcommitted } = sessionShares(nodeLimits, options.maxSessions);
  if (shares.length === 0) return { reason: "the kernel says no per-user inotify or fanotify limits" };
  const trial = spawnSync(
    perlPath,
    ["-e", TRY_IN_OWN_NAMESPACE, String(syscalls.unshare), ...shares.flat().map(String)],
    {
      encoding: "utf8",
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 10_000,
    },
  );
  if (trial.status !== 0)
    return {
      reason: `a trial could not lower them in a user namespace (${trial.error?.message ?? (trial.stderr.trim() || `exit ${trial.status ?? trial.signal}`)})`,
    };
  return { limits: { perlPath, setns: syscalls.setns, shares }, overcommitted };
}

/** Perl writing its `name value` pairs to /proc/sys/user of the user namespace it is in; $fail says what went wrong. */
const WRITE_SHARES = String.raw`
while (@ARGV) {
  my ($name, $value) = splice(@ARGV, 0, 2);
  open(my $file, ">", "/proc/sys/user/$name") or fail("cannot open /proc/sys/user/$name: $!");
  print $file "$value\n" or fail("cannot write /proc/sys/user/$name: $!");
  close($file) or fail("cannot write /proc/sys/user/$name: $!");
}
`;

const FAIL = String.raw`sub fail { print STDERR "$_[0]\n"; exit 1 }`;

/** Arguments: unshare's syscall number, then the pairs. */
const TRY_IN_OWN_NAMESPACE = String.raw`${FAIL}
my $unshare = shift @ARGV;
syscall($unshare, 0x10000000) == 0 or fail("unshare(CLONE_NEWUSER): $!");
${WRITE_SHARES}`;

/**
 * Arguments: setns's syscall number, the pid of bwrap's init, then the pairs. The init may change namespaces once:
 * to mount the session's devpts bwrap first maps the sandbox's user to root in a namespace, then makes a second one
 * inside it mapping it back, where the session runs. The one written is the init's once it maps the sandbox's user as
 * itself (either ceiling bounds the session; the session's first command reads only its own).
 */
const WRITE_IN_NAMESPACE = String.raw`${FAIL}
my ($setns, $pid) = splice(@ARGV, 0, 2);
for (my $reads = 0; ; $reads++) {
  open(my $map, "<", "/proc/$pid/uid_map") or fail("cannot read /proc/$pid/uid_map: $!");
  my $line = <$map>;
  close $map;
  last if defined $line && $line =~ /^\s*(\d+)/ && $1 == $<;
  fail("the user namespace of $pid did not map uid $< as itself within 10 s") if $reads > 5000;
  select(undef, undef, undef, 0.002);
}
open(my $namespace, "<", "/proc/$pid/ns/user") or fail("cannot open /proc/$pid/ns/user: $!");
syscall($setns, fileno($namespace), 0x10000000) == 0 or fail("cannot join the user namespace of $pid: $!");
${WRITE_SHARES}`;

/** Lowers the ceilings of the user namespace `pid` is in to the session's shares. */
export function writeNamespaceLimits(limits: SessionNamespaceLimits, pid: number): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(
      limits.perlPath,
      ["-e", WRITE_IN_NAMESPACE, String(limits.setns), String(pid), ...limits.shares.flat().map(String)],
      { timeout: 10_000 },
      (error, _stdout, stderr) => {
        if (error === null) resolve();
        else reject(new Error(String(stderr).trim() || error.message));
      },
    );
  });
}

/**
 * `command`, first waiting inside the session until its namespace's last share reads as written (cat: dash reads a
 * file a byte at a time, and a sysctl answers only its first read), some 10 s at most: then it says so and exits 125.
 * The wait's own commands are the system's (/usr/bin, /bin), not the session's PATH's: a folder on it that sessions
 * can write (OZ0_SESSION_PATH is the operator's) would run a `cat` of an earlier session's before the shares hold.
 */
export function gatedOnNamespaceLimits(limits: SessionNamespaceLimits, command: readonly string[]): string[] {
  const [name, share] = limits.shares.at(-1)!;
  return [
    "/bin/sh",
    "-c",
    `path=$PATH; PATH=/usr/bin:/bin; i=0; until [ "$(cat /proc/sys/user/${name})" = ${share} ]; do i=$((i + 1)); if [ $i -gt ${GATE_READS} ]; then echo "oz0: the sandbox did not set this session's share of the node's inotify and fanotify limits; the session did not start (the sandbox's log says why)" >&2; exit 125; fi; sleep 0.005; done; PATH=$path; exec "$@"`,
    "oz0-session",
    ...command,
  ];
}
