// The seccomp filter an isolated session runs under: no user namespace of its
// own (the way in to many of the kernel's local privilege escalations, and
// to capabilities over mounts and networks), no namespace joined, none of
// the keyrings, eBPF, performance counters, userfaultfd or io_uring. What it
// refuses, and why, is in syscall-filter/generate.py, which wrote the
// programs beside it with libseccomp; they are checked in, so a node needs
// neither Python nor libseccomp. Under bubblewrap, bwrap loads the program
// (--seccomp) just before the session's first command; in the `user` mode a
// few lines of perl load it as root, then exec setpriv, which drops to the
// session's uid and execs the harness: the filter stays through both. Perl as in
// landlock-launcher.ts: Node cannot call prctl(2), and this package writes no
// native code.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { LINUX_SYSCALLS } from "@oz0/harness/host";
import type { IsolationName } from "./isolation-choice.js";
import type { SyscallFilterSetting } from "./sandbox-config.js";
import { systemCommand } from "./system-command.js";

/** The filter's program for each architecture it was written for (the names generate.py gives them). */
const PROGRAMS: Partial<Record<NodeJS.Architecture, string>> = { x64: "x86_64.bpf", arm64: "aarch64.bpf" };

/** The program for this node, or why sessions run without one. */
export type SyscallFilterChoice = { program: string; reason?: undefined } | { program?: undefined; reason: string };

export function sessionSyscallFilter(arch: NodeJS.Architecture = process.arch): SyscallFilterChoice {
  if (process.platform !== "linux") return { reason: `seccomp is Linux's (this is ${process.platform})` };
  const name = PROGRAMS[arch];
  if (name === undefined) return { reason: `no filter program for ${arch} (only x64 and arm64)` };
  // Beside src/ and dist/ alike: the package's syscall-filter folder.
  const program = fileURLToPath(new URL(`../syscall-filter/${name}`, import.meta.url));
  if (!existsSync(program)) return { reason: `${program} is missing from the installed package` };
  return { program };
}

/**
 * Perl that reads the filter's program from the file named in $filter_file into $bpf, checked, before anything
 * walls the file off (landlock-launcher.ts's programs read it before their domain). Its caller defines fail().
 */
export const READ_FILTER_PROGRAM = String.raw`
open(my $fh, "<:raw", $filter_file) or fail("cannot read $filter_file: $!");
$bpf = do { local $/; <$fh> };
close $fh;
length($bpf) > 0 && length($bpf) % 8 == 0 or fail("$filter_file is not a filter program");
`;

/**
 * Perl that loads $bpf, once no_new_privs is set (setpriv, which runs next in the `user` mode, sets it too), then
 * closes the descriptors the command would inherit past its stdio: one left open by whatever started the sandbox
 * never reaches the session. `struct sock_fprog` is a count of 8-byte instructions and a pointer, at offset 8 on both
 * 64-bit architectures; $prctl and $close are the syscall numbers.
 */
export const LOAD_FILTER_PROGRAM = String.raw`
syscall($prctl, 22, 2, pack("S x6 P", length($bpf) / 8, $bpf), 0, 0) == 0 or fail("prctl(PR_SET_SECCOMP) failed: $!");
if (opendir(my $fds, "/proc/self/fd")) { my @open = grep { /^\d+$/ && $_ > 2 } readdir $fds; closedir $fds; syscall($close, $_ + 0) for @open }
`;

/** Arguments: prctl's and close's syscall numbers, the program's file, then the command. */
const ENTER_FILTER = String.raw`
my $prctl = shift @ARGV;
my $close = shift @ARGV;
my $filter_file = shift @ARGV;
sub fail { print STDERR "oz0 syscall filter: $_[0]\n"; exit 125 }
my $bpf;
${READ_FILTER_PROGRAM}
syscall($prctl, 38, 1, 0, 0, 0) == 0 or fail("prctl(PR_SET_NO_NEW_PRIVS) failed: $!");
${LOAD_FILTER_PROGRAM}
exec { $ARGV[0] } @ARGV;
print STDERR "oz0 syscall filter: cannot run $ARGV[0]: $!\n";
exit 127;
`;

/** What the `user` mode loads the filter with: a perl and the program. */
export interface UserModeSyscallFilter {
  perlPath: string;
  program: string;
}

/** `command` run by perl after it loaded `program`: what it then runs, and all it starts, stay under the filter. */
export function filteredCommand(options: UserModeSyscallFilter & { command: readonly string[] }): string[] {
  const syscalls = LINUX_SYSCALLS[process.arch];
  if (syscalls === undefined) throw new Error(`prctl's syscall number is not known for ${process.arch}`);
  return [
    options.perlPath,
    "-e",
    ENTER_FILTER,
    String(syscalls.prctl),
    String(syscalls.close),
    options.program,
    ...options.command,
  ];
}

/** The `user` mode's filter, tried once with a command that exits at once; or why its sessions run without one. */
export function detectUserModeSyscallFilter():
  { filter: UserModeSyscallFilter; reason?: undefined } | { filter?: undefined; reason: string } {
  const { program, reason } = sessionSyscallFilter();
  if (program === undefined) return { reason };
  if (LINUX_SYSCALLS[process.arch] === undefined)
    return { reason: `prctl's syscall number is not known for ${process.arch} (only x64 and arm64)` };
  const perlPath = systemCommand("perl");
  if (perlPath === undefined) return { reason: "no perl in /usr/bin or /bin (Debian's perl-base) to load it" };
  const filter = { perlPath, program };
  const [file, ...args] = filteredCommand({ ...filter, command: ["/bin/sh", "-c", "exit 7"] });
  const trial = spawnSync(file!, args, { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] });
  if (trial.status !== 7)
    return {
      reason: `a trial did not work (${trial.error?.message ?? (trial.stderr.trim() || `exit ${trial.status ?? trial.signal}`)}); the kernel needs seccomp filters (CONFIG_SECCOMP_FILTER)`,
    };
  return { filter };
}

/**
 * The filter the sessions of `mode` run under, from `setting` (OZ0_SESSION_SYSCALL_FILTER) and what works here:
 * bwrap's program (its trial loaded it, or `bwrapReason` says why not), the `user` mode's (tried once, with perl),
 * none in the `none` mode; with the start-up line's fields. `on` throws where there is none: a guard that was asked
 * for is never dropped in silence.
 */
export function chooseSyscallFilter(options: {
  setting: SyscallFilterSetting;
  mode: IsolationName;
  bubblewrap: { syscallFilter?: string | undefined; syscallFilterReason?: string | undefined };
}): { bwrap?: string; user?: UserModeSyscallFilter; fields: ReturnType<typeof syscallFilterFields> } {
  const { setting, mode, bubblewrap } = options;
  let chosen: { bwrap?: string; user?: UserModeSyscallFilter; reason?: string | undefined };
  if (mode === "none") chosen = { reason: "sessions run without OS isolation" };
  else if (setting === "off") chosen = { reason: "OZ0_SESSION_SYSCALL_FILTER=off" };
  else if (mode === "bwrap")
    chosen =
      bubblewrap.syscallFilter !== undefined
        ? { bwrap: bubblewrap.syscallFilter }
        : { reason: bubblewrap.syscallFilterReason };
  else {
    const found = detectUserModeSyscallFilter();
    chosen = found.filter !== undefined ? { user: found.filter } : { reason: found.reason };
  }
  const fields = syscallFilterFields({ program: chosen.bwrap ?? chosen.user?.program, reason: chosen.reason });
  if (setting === "on" && fields.syscallFilter === "off")
    throw new Error(
      `OZ0_SESSION_SYSCALL_FILTER=on, but sessions would run without the seccomp filter: ${fields.syscallFilterReason}; run them under bubblewrap or in the user mode on a kernel with seccomp filters, or set OZ0_SESSION_SYSCALL_FILTER=auto`,
    );
  return {
    ...(chosen.bwrap !== undefined ? { bwrap: chosen.bwrap } : {}),
    ...(chosen.user !== undefined ? { user: chosen.user } : {}),
    fields,
  };
}

/** The start-up line's fields: the program sessions run under, or `off` with the reason. */
export function syscallFilterFields(choice: { program?: string | undefined; reason?: string | undefined }): {
  syscallFilter: string;
  syscallFilterReason?: string;
} {
  return choice.program !== undefined
    ? { syscallFilter: path.basename(choice.program) }
    : { syscallFilter: "off", syscallFilterReason: choice.reason ?? "unknown reason" };
}
