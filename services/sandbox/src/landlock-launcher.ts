// With isolation `none` a harness runs as the sandbox's own user, so it could
// read the sandbox process's memory and environment (/proc/<pid>/mem,
// /proc/<pid>/environ): where the kernel lets it (Yama's ptrace scope 0, or
// the sandbox running as root) the memory holds the orchestrator's
// credential as it arrived on the last RunSession, which every service
// takes as the orchestrator's (an attacker review found it there).
//
// A process inside a Landlock domain (Linux 5.13+) may not ptrace, nor read
// the memory of, any process outside its domain, whoever it runs as, root
// included (ptrace's attach checks; /proc/<pid>/environ, a read check, stays
// readable, as the README says). So the harness is started through perl, which
// enters a domain of its own and execs it. The domain handles one file-system
// right the harness has no use for (making block devices, which needs
// CAP_MKNOD anyway), so it restricts nothing else; what the harness starts
// stays in it. Entering one unprivileged takes no_new_privs: set-user-id
// programs (sudo) do not raise the harness's privileges, as under bubblewrap.
//
// Node cannot call landlock(2) or prctl(2), and this package writes no native
// code: perl's `syscall` builtin reaches them (perl-base is essential on
// Debian). The landlock calls have the same numbers on every architecture
// (444, 446); prctl's is known for x86-64 and arm64.
import { spawnSync } from "node:child_process";
import { commandIsExecutable, LINUX_SYSCALLS, type HarnessLauncher } from "@oz0/harness/host";
import { LOAD_FILTER_PROGRAM, READ_FILTER_PROGRAM } from "./syscall-filter.js";
import { systemCommand } from "./system-command.js";

/**
 * How the programs below begin: their first three arguments are prctl's and close's syscall numbers and the file of
 * a seccomp program to load too (syscall-filter.ts), or "" for none, read here, before a domain may wall it off.
 */
const PROGRAM_HEAD = String.raw`
my $prctl = shift @ARGV;
my $close = shift @ARGV;
my $filter_file = shift @ARGV;
sub fail { print STDERR "oz0 landlock: $_[0]\n"; exit 125 }
my $bpf;
if ($filter_file ne "") {${READ_FILTER_PROGRAM}}
`;

/**
 * How they end: no_new_privs (or CAP_SYS_ADMIN, which a root container lacks) lets the domain be entered; then the
 * seccomp program, when one was read (one perl for both: each start of one costs a session some 2 ms of CPU); then
 * the command runs in them.
 */
const ENTER_AND_EXEC = String.raw`
syscall($prctl, 38, 1, 0, 0, 0) == 0 or fail("prctl(PR_SET_NO_NEW_PRIVS) failed: $!");
syscall(446, $ruleset, 0) == 0 or fail("landlock_restrict_self failed: $!");
syscall($close, $ruleset);
if (defined $bpf) {${LOAD_FILTER_PROGRAM}}
exec { $ARGV[0] } @ARGV;
print STDERR "oz0 landlock: cannot run $ARGV[0]: $!\n";
exit 127;
`;

/** Rules on TCP ports came with Landlock ABI 4; the programs below read the kernel's into $abi. */
const NEED_NETWORK_RULES = String.raw`$abi >= 4 or fail("the kernel's Landlock is ABI $abi; rules on TCP ports need ABI 4 (Linux 6.7+)");`;

/**
 * The one network rule: TCP sockets may bind port 0 (a LANDLOCK_RULE_NET_PORT rule, 2: { allowed_access, port }, both
 * 64 bits). In a variable: perl folds a pack of constants into a read-only value, which syscall refuses to pass.
 */
const ALLOW_PORT_ZERO = String.raw`my $rule = pack("QQ", 1, 0);
syscall(445, $ruleset, 2, $rule, 0) == 0 or fail("landlock_add_rule(port 0) failed: $!");`;

/**
 * allow(path, rights): a rule granting `rights` beneath `path`; for a file, only those of them in $file_rights, which
 * the program sets first. A path that cannot be opened is skipped, as bubblewrap's --ro-bind-try. O_PATH (010000000)
 * and O_CLOEXEC (02000000) are the same on x86-64 and arm64, the two architectures LINUX_SYSCALLS
 * (@oz0/harness/host) knows.
 */
const ALLOW_BENEATH = String.raw`sub allow {
  my ($path, $rights) = @_;
  sysopen(my $fh, $path, 010000000 | 02000000) or return;
  $rights &= $file_rights unless -d $fh;
  syscall(445, $ruleset, 1, pack("Ql", $rights & $fs, fileno($fh)), 0) == 0 or fail("landlock_add_rule($path) failed: $!");
  close $fh;
}`;

/** Arguments: PROGRAM_HEAD's, then the command to exec inside the domain. */
const ENTER_DOMAIN = `${PROGRAM_HEAD}${String.raw`
my $attr = pack("Q", 1 << 11);
my $ruleset = syscall(444, $attr, length($attr), 0);
$ruleset >= 0 or fail("landlock_create_ruleset failed: $!");
`}${ENTER_AND_EXEC}`;

/**
 * A domain that walls the file system off, for a program the orchestrator
 * runs on its own host (a plugin's command hook, where bubblewrap cannot
 * run). Arguments: PROGRAM_HEAD's; capset's number; 1 or 0 (below); how many read-only
 * paths, then them; how many writable paths, then them; then the command.
 * The domain handles every file-system right the kernel's Landlock knows
 * (ABI 1: execute to make_sym; 2: refer; 3: truncate; 5: ioctl_dev) and
 * allows them only beneath the paths given: read and execute beneath the
 * read-only ones and the program's own /proc/<pid> (opened as /proc/self
 * before the exec, which keeps the pid), all of them beneath the writable
 * ones. From ABI 6 (Linux 6.12) it is also scoped: no signal to, and no
 * abstract Unix socket of, a process outside it. The network is not walled,
 * but for one rule when the argument after PROGRAM_HEAD's is 1 (ABI 4,
 * Linux 6.7+): TCP sockets bind port 0 alone, as in
 * ENTER_SESSION_DOMAIN below, so the program listens only where the
 * kernel picks, never on a stopped service's port (session-listen-ports.ts).
 * A path that cannot be opened is skipped, as bubblewrap's --ro-bind-try.
 * Run by root (an orchestrator as root), the program keeps no capability:
 * with CAP_NET_RAW or CAP_NET_ADMIN it could read the node's loopback traffic
 * or redirect a fixed port to its own, with CAP_SYS_MODULE load a module. Its
 * bounding set is emptied (PR_CAPBSET_DROP, 24, each; EINVAL past the last),
 * so no exec gives root's back, its ambient set cleared (PR_CAP_AMBIENT 47,
 * CLEAR_ALL 4), then its effective, permitted and inheritable sets (capset,
 * _LINUX_CAPABILITY_VERSION_3, two 32-bit halves of each).
 */
const ENTER_WALLED_DOMAIN = `${PROGRAM_HEAD}${String.raw`
my $capset = shift @ARGV;
my $kernel_ports_only = shift @ARGV;
my $count = shift @ARGV;
my @read_only = splice(@ARGV, 0, $count);
$count = shift @ARGV;
my @writable = splice(@ARGV, 0, $count);
my $abi = syscall(444, 0, 0, 1);
$abi >= 1 or fail("the kernel has no Landlock: $!");
my $fs = (1 << 13) - 1;
$fs |= 1 << 13 if $abi >= 2;
$fs |= 1 << 14 if $abi >= 3;
$fs |= 1 << 15 if $abi >= 5;
my $net = 0;
if ($kernel_ports_only) {
  ${NEED_NETWORK_RULES}
  $net = 1;
}
my $attr = $abi >= 6 ? pack("QQQ", $fs, $net, 3) : $net ? pack("QQ", $fs, $net) : pack("Q", $fs);
my $ruleset = syscall(444, $attr, length($attr), 0);
$ruleset >= 0 or fail("landlock_create_ruleset failed: $!");
if ($net) { ${ALLOW_PORT_ZERO} }
my $file_rights = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15);
${ALLOW_BENEATH}
allow($_, (1 << 0) | (1 << 2) | (1 << 3)) for @read_only, "/proc/self";
allow($_, $fs) for @writable;
if ($> == 0) {
  for my $cap (0 .. 63) { syscall($prctl, 24, $cap, 0, 0, 0) }
  syscall($prctl, 47, 4, 0, 0, 0);
  my $header = pack("LL", 0x20080522, 0);
  my $sets = pack("L6", 0, 0, 0, 0, 0, 0);
  syscall($capset, $header, $sets) == 0 or fail("capset failed: $!");
}
`}${ENTER_AND_EXEC}`;

/**
 * The `user` mode's domain, entered as root before setpriv drops to the
 * session's uid (session-user-launcher.ts). Arguments: PROGRAM_HEAD's; 1 or
 * 0 (the network rule below); how many writable paths, then them; then the
 * command. It has up to three parts:
 *
 * - The network rule (ABI 4, Linux 6.7+), when the argument after
 *   PROGRAM_HEAD's is 1: TCP sockets may bind port 0 alone, so the kernel
 *   picks the port from its ephemeral range (session-listen-ports.ts says
 *   why). A ruleset attribute's second field is handled_access_net:
 *   LANDLOCK_ACCESS_NET_BIND_TCP is 1.
 * - The write rule, when writable paths are given (ABI 2, Linux 5.19+; before
 *   it a file never moved to another folder in a domain that handles any
 *   file-system right, and git moves its objects so): every right that
 *   changes the file system is handled (write_file 1, remove_dir 4 to
 *   make_sym 12, refer 13, and truncate 14 from ABI 3) and allowed beneath
 *   those paths alone, and writing to (and truncating) the character
 *   devices directly in /dev (/dev/null, /dev/tty) and the terminals of
 *   /dev/pts: a rule on /dev itself also let a session write to a regular
 *   file a runtime placed there (Kubernetes' /dev/termination-log, 0666), which
 *   outlives it (attacker review). Reading and running
 *   stay unhandled, so free (session-write-rule.ts says why writes are
 *   walled).
 * - From ABI 6 (Linux 6.12) a scope, LANDLOCK_SCOPE_SIGNAL (2): no signal to a
 *   process outside the domain. What a session starts shares a uid with the
 *   helpers the sandbox runs as that uid (session-user-helper.ts), and would
 *   otherwise stop them (SIGSTOP): the killer of the uid's processes, the
 *   remover of its files.
 *
 * A path that cannot be opened is skipped (a node without /var/crash).
 */
const ENTER_SESSION_DOMAIN = `${PROGRAM_HEAD}${String.raw`
my $kernel_ports_only = shift @ARGV;
my $count = shift @ARGV;
my @writable = splice(@ARGV, 0, $count);
my $abi = syscall(444, 0, 0, 1);
$abi >= 1 or fail("the kernel has no Landlock: $!");
my $net = 0;
if ($kernel_ports_only) {
  ${NEED_NETWORK_RULES}
  $net = 1;
}
my $fs = 0;
if (@writable) {
  $abi >= 2 or fail("the kernel's Landlock is ABI $abi; a rule on writes needs ABI 2 (Linux 5.19+)");
  $fs = (1 << 1) | (((1 << 14) - 1) & ~((1 << 4) - 1));
  $fs |= 1 << 14 if $abi >= 3;
}
my $attr = $abi >= 6 ? pack("QQQ", $fs, $net, 2) : $net ? pack("QQ", $fs, $net) : pack("Q", $fs);
my $ruleset = syscall(444, $attr, length($attr), 0);
$ruleset >= 0 or fail("landlock_create_ruleset failed: $!");
if ($net) { ${ALLOW_PORT_ZERO} }
my $file_rights = (1 << 1) | (1 << 14);
${ALLOW_BENEATH}
if ($fs) {
  allow($_, $fs) for @writable;
  if (opendir(my $devices, "/dev")) {
    for (readdir $devices) { allow("/dev/$_", $file_rights) if lstat("/dev/$_") && -c _ }
    closedir $devices;
  }
  allow("/dev/pts", $file_rights);
}
`}${ENTER_AND_EXEC}`;

/** Where a harness can be started inside a Landlock domain: a perl, and the syscall numbers here. */
export interface Landlock {
  perlPath: string;
  syscalls: { prctl: number; close: number; capset: number };
}

/**
 * A Landlock domain that works here, or why not (tried once, with a command
 * that exits at once). `perlPath`: the perl to try; default the system's.
 */
export function detectLandlock(options: { perlPath?: string } = {}): LandlockDetection {
  return detectWith({
    ...options,
    program: ENTER_DOMAIN,
    needs: "the kernel needs Landlock (Linux 5.13+, landlock in its LSM list)",
  });
}

/** The same for the network rule of sessionDomainCommand: Landlock with network rules. */
export function detectListenPortsDomain(options: { perlPath?: string } = {}): LandlockDetection {
  return detectWith({
    ...options,
    program: ENTER_SESSION_DOMAIN,
    programArgs: ["1", "0"],
    needs: "the kernel needs Landlock with network rules (Linux 6.7+, landlock in its LSM list)",
  });
}

/** The same for the write rule of sessionDomainCommand: Landlock ABI 2. */
export function detectWriteRuleDomain(options: { perlPath?: string } = {}): LandlockDetection {
  return detectWith({
    ...options,
    program: ENTER_SESSION_DOMAIN,
    programArgs: ["0", "1", "/"],
    needs: "the kernel needs Landlock ABI 2 (Linux 5.19+, landlock in its LSM list)",
  });
}

export type LandlockDetection = { landlock: Landlock; reason?: undefined } | { landlock?: undefined; reason: string };

function detectWith(options: {
  perlPath?: string;
  program: string;
  /** The program's own arguments, between PROGRAM_HEAD's and the command. */
  programArgs?: readonly string[];
  needs: string;
}): LandlockDetection {
  if (process.platform !== "linux") return { reason: `Landlock is Linux's (this is ${process.platform})` };
  const syscalls = LINUX_SYSCALLS[process.arch];
  if (syscalls === undefined)
    return { reason: `prctl's syscall number is not known for ${process.arch} (only x64 and arm64)` };
  const perlPath = options.perlPath ?? systemCommand("perl");
  if (perlPath === undefined) return { reason: "no perl in /usr/bin or /bin (Debian's perl-base)" };
  const args = ["-e", options.program, ...head(syscalls), ...(options.programArgs ?? []), "/bin/sh", "-c", "exit 7"];
  const trial = spawnSync(perlPath, args, {
    encoding: "utf8",
    stdio: ["ignore", "ignore", "pipe"],
  });
  if (trial.status !== 7)
    return {
      reason: `a trial did not work (${trial.error?.message ?? (trial.stderr.replace(/^oz0 landlock: /, "").trim() || `exit ${trial.status ?? trial.signal}`)}); ${options.needs}`,
    };
  return {
    landlock: { perlPath, syscalls: { prctl: syscalls.prctl, close: syscalls.close, capset: syscalls.capset } },
  };
}

/** The programs' first three arguments: the syscall numbers, and the seccomp program to load too ("" for none). */
function head(syscalls: Landlock["syscalls"], filterProgram?: string): string[] {
  return [String(syscalls.prctl), String(syscalls.close), filterProgram ?? ""];
}

/** Perl running `program` with PROGRAM_HEAD's arguments; the program's own and the command follow. */
function perlRunning(landlock: Landlock, program: string, filterProgram?: string): string[] {
  return [landlock.perlPath, "-e", program, ...head(landlock.syscalls, filterProgram)];
}

/** `inner`, starting each harness inside a Landlock domain of its own (see the top of this file). */
export function landlockLauncher(options: { inner: HarnessLauncher; landlock: Landlock }): HarnessLauncher {
  const { inner, landlock } = options;
  return {
    launch(spec) {
      // A command that cannot run is started as is, so the host reports spawn_failed rather than perl's exit code.
      if (!commandIsExecutable(spec)) return inner.launch(spec);
      return inner.launch({
        ...spec,
        command: [...perlRunning(landlock, ENTER_DOMAIN), ...spec.command],
      });
    },
  };
}

/**
 * `command` as run inside a walled Landlock domain (ENTER_WALLED_DOMAIN
 * above): it reads and runs what lies beneath `readOnly`, changes only what
 * lies beneath `writable`, and reaches no other file, nor another process's
 * memory, whoever it runs as.
 */
export function walledCommand(
  landlock: Landlock,
  options: {
    readOnly: readonly string[];
    writable: readonly string[];
    /** TCP sockets may bind port 0 alone (detectListenPortsDomain says whether the kernel can). */
    kernelPortsOnly?: boolean;
    /** The seccomp program (syscall-filter.ts) to load too, read before the domain walls its file off. */
    filterProgram?: string | undefined;
    command: readonly string[];
  },
): string[] {
  return [
    ...perlRunning(landlock, ENTER_WALLED_DOMAIN, options.filterProgram),
    String(landlock.syscalls.capset),
    options.kernelPortsOnly === true ? "1" : "0",
    String(options.readOnly.length),
    ...options.readOnly,
    String(options.writable.length),
    ...options.writable,
    ...options.command,
  ];
}

/**
 * `command` inside the `user` mode's domain (ENTER_SESSION_DOMAIN above): TCP sockets bind port 0 alone when
 * `kernelPortsOnly`, the file system is changed only beneath `writable` when any is given, and signals reach nothing
 * outside; under the seccomp program `filterProgram` too when given, loaded by the same perl.
 */
export function sessionDomainCommand(
  landlock: Landlock,
  options: {
    /** TCP sockets may bind port 0 alone (detectListenPortsDomain says whether the kernel can). */
    kernelPortsOnly: boolean;
    /** Where the command may write; none: writes are not walled (detectWriteRuleDomain says whether they can be). */
    writable: readonly string[];
    filterProgram?: string | undefined;
    command: readonly string[];
  },
): string[] {
  return [
    ...perlRunning(landlock, ENTER_SESSION_DOMAIN, options.filterProgram),
    options.kernelPortsOnly ? "1" : "0",
    String(options.writable.length),
    ...options.writable,
    ...options.command,
  ];
}

/** `command` where it may bind TCP sockets to port 0 only (the network rule of sessionDomainCommand alone). */
export function listenPortsCommand(
  landlock: Landlock,
  command: readonly string[],
  options: { filterProgram?: string | undefined } = {},
): string[] {
  return sessionDomainCommand(landlock, {
    kernelPortsOnly: true,
    writable: [],
    filterProgram: options.filterProgram,
    command,
  });
}
