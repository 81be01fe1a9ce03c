// The sandbox's own work as a session's uid in the `user` mode (killing the
// uid's processes, removing its files) runs in a perl that starts as root and
// drops to the uid itself, with no exec after it.
//
// A process whose uid changed from root is not dumpable until it next execs:
// no process of the uid can ptrace it, nor open its /proc files. A helper
// started the plain way (spawn's uid option: the child drops root, then execs
// /bin/sh) is dumpable from its exec on, and a session process waiting for it
// could attach in the moment before it did its work and make it run anything:
// with the sandbox's own limits (RLIMIT_NPROC, so a fork bomb past
// OZ0_SESSION_MAX_PROCESSES), or never exiting, which hung the sandbox
// waiting for it. perl-base is essential on Debian; the `user` mode requires
// it (session-user-detection.ts).
import { spawn } from "node:child_process";
import { LINUX_SYSCALLS } from "@oz0/harness/host";
import type { SessionUser } from "./session-user-processes.js";
import { systemCommand } from "./system-command.js";

/**
 * Drops root for good: the supplementary groups become the gid alone, then
 * the real, effective and saved gid and uid the session's (perl's own `$<`
 * and `$>` leave the saved uid root's, and POSIX.pm takes longer to load than
 * the rest of the helper runs: the syscalls are made directly). Refuses uid
 * or gid 0 (a mistake, never a session's). Arguments: setresgid's and
 * setresuid's numbers, the uid, the gid.
 */
const DROP_TO_USER = String.raw`
my ($setresgid, $setresuid, $uid, $gid) = splice(@ARGV, 0, 4);
$uid =~ /^[1-9]\d*$/ && $gid =~ /^[1-9]\d*$/ or die "oz0 helper: not a session uid and gid: $uid $gid\n";
$) = "$gid $gid";
syscall($setresgid, $gid + 0, $gid + 0, $gid + 0) == 0 or die "oz0 helper: setresgid($gid): $!\n";
syscall($setresuid, $uid + 0, $uid + 0, $uid + 0) == 0 or die "oz0 helper: setresuid($uid): $!\n";
open(my $status, "<", "/proc/self/status") or die "oz0 helper: cannot read /proc/self/status: $!\n";
my $seen = join("", grep { /^(Uid|Gid|Groups):/ } <$status>);
$seen eq "Uid:\t$uid\t$uid\t$uid\t$uid\nGid:\t$gid\t$gid\t$gid\t$gid\nGroups:\t$gid \n" or die "oz0 helper: still privileged after dropping to $uid:\n$seen";
`;

export interface SessionUserHelperResult {
  /** perl's exit status; null when a signal ended it. */
  status: number | null;
  /** What it wrote to stderr, for the caller's log. */
  stderr: string;
  /** It ran past `deadlineMs`, and the sandbox killed it (a process of the uid can stop it, as a process of the same uid). */
  pastDeadline: boolean;
}

/**
 * Runs the perl `script` as `user` (its @ARGV: `args`), with the system's
 * perl. Rejects only when perl could not be started.
 */
export function runAsSessionUser(options: {
  user: SessionUser;
  script: string;
  args?: readonly string[];
  /** Past this the helper is SIGKILLed (the result says so); default none. */
  deadlineMs?: number;
}): Promise<SessionUserHelperResult> {
  const { user } = options;
  const perl = systemCommand("perl");
  if (perl === undefined)
    return Promise.reject(new Error("no perl in /usr/bin or /bin: install perl-base to use the user isolation mode"));
  const syscalls = LINUX_SYSCALLS[process.arch];
  if (syscalls === undefined)
    return Promise.reject(new Error(`the user isolation mode knows no syscall numbers for ${process.arch}`));
  return new Promise((resolve, reject) => {
    const helper = spawn(
      perl,
      [
        "-e",
        `${DROP_TO_USER}\n${options.script}`,
        String(syscalls.setresgid),
        String(syscalls.setresuid),
        String(user.uid),
        String(user.gid),
        ...(options.args ?? []),
      ],
      { env: {}, cwd: "/", stdio: ["ignore", "ignore", "pipe"] },
    );
    const stderr: Buffer[] = [];
    let pastDeadline = false;
    const deadline =
      options.deadlineMs === undefined
        ? undefined
        : setTimeout(() => {
            pastDeadline = true;
            helper.kill("SIGKILL");
          }, options.deadlineMs);
    helper.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
    helper.once("error", (error) => {
      clearTimeout(deadline);
      reject(error);
    });
    helper.once("close", (status) => {
      clearTimeout(deadline);
      resolve({ status, stderr: Buffer.concat(stderr).toString("utf8").trim(), pastDeadline });
    });
  });
}
