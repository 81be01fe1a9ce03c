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
import type { SessionUser } from "./session-user-processes.js";
import { systemCommand } from "./system-command.js";

/**
 * Drops root for good: the supplementary groups become the gid alone, then
 * the real, effective and saved gid and uid the session's. Refuses uid or
 * gid 0 (a mistake, never a session's).
 */
const DROP_TO_USER = String.raw`
use strict; use POSIX ();
my ($uid, $gid) = splice(@ARGV, 0, 2);
$uid =~ /^[1-9]\d*$/ && $gid =~ /^[1-9]\d*$/ or die "oz0 helper: not a session uid and gid: $uid $gid\n";
$) = "$gid $gid";
POSIX::setgid($gid) or die "oz0 helper: setgid($gid): $!\n";
POSIX::setuid($uid) or die "oz0 helper: setuid($uid): $!\n";
$< == $uid && $> == $uid && $( == $gid && $) eq "$gid $gid" or die "oz0 helper: still privileged after dropping to $uid\n";
`;

export interface SessionUserHelperResult {
  /** perl's exit status; null when a signal ended it. */
  status: number | null;
  /** What it wrote to stderr, for the caller's log. */
  stderr: string;
}

/**
 * Runs the perl `script` as `user` (its @ARGV: `args`), with the system's
 * perl. Rejects only when perl could not be started.
 */
export function runAsSessionUser(options: {
  user: SessionUser;
  script: string;
  args?: readonly string[];
}): Promise<SessionUserHelperResult> {
  const { user } = options;
  const perl = systemCommand("perl");
  if (perl === undefined)
    return Promise.reject(new Error("no perl in /usr/bin or /bin: install perl-base to use the user isolation mode"));
  return new Promise((resolve, reject) => {
    const helper = spawn(
      perl,
      ["-e", `${DROP_TO_USER}\n${options.script}`, String(user.uid), String(user.gid), ...(options.args ?? [])],
      { env: {}, cwd: "/", stdio: ["ignore", "ignore", "pipe"] },
    );
    const stderr: Buffer[] = [];
    helper.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
    helper.once("error", reject);
    helper.once("close", (status) => resolve({ status, stderr: Buffer.concat(stderr).toString("utf8").trim() }));
  });
}
