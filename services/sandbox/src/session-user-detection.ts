// Whether the `user` isolation mode works on this host, found out by trying,
// as bubblewrap's detection does: running as root is not enough (a container
// may lack CAP_SETUID, or map no uid of the range), and a session's uid must
// be able to pass every directory on the way to the sandbox root.
import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { LINUX_SYSCALLS } from "@oz0/harness/host";
import { trySandbox } from "./bubblewrap-launcher.js";
import { findSetpriv } from "./parent-death-launcher.js";
import type { SessionUidRange } from "./sandbox-config.js";
import { closedToOtherUsers, setprivUserArgs } from "./session-user-launcher.js";
import { systemCommand } from "./system-command.js";

export interface SessionUsersDetection {
  available: boolean;
  /** The setpriv that worked. */
  setprivPath?: string;
  /** Why the mode is not available, for logs. */
  reason?: string;
  /** What weakens the mode on this host, for logs. */
  warnings: string[];
}

function run(file: string, args: string[]): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { timeout: 10_000, env: {}, cwd: "/" }, (error, stdout, stderr) => {
      resolve({ ok: error === null, output: `${stdout}${stderr}`.trim() || (error?.message ?? "") });
    });
  });
}

/**
 * `root` must exist with its `sessions/` (prepareRoot). With `bwrapPath`, whether bubblewrap can run sessions under
 * the range's uids (bubblewrap-launcher.ts): bwrap binds the session's directories as root, so the uids need not
 * pass the way to the sandbox root.
 */
export async function detectSessionUsers(options: {
  root: string;
  range: SessionUidRange;
  setprivPath?: string;
  bwrapPath?: string;
}): Promise<SessionUsersDetection> {
  const uid = process.getuid?.();
  if (uid !== 0) {
    return {
      available: false,
      warnings: [],
      reason: `the sandbox runs as uid ${uid ?? "unknown"}, not root, so it cannot run sessions under uids of their own`,
    };
  }
  const setpriv = options.setprivPath ?? findSetpriv();
  if (setpriv === undefined || !existsSync(setpriv)) {
    return {
      available: false,
      warnings: [],
      reason: `setpriv not found (${options.setprivPath ?? "/usr/bin/setpriv, /bin/setpriv"}); install util-linux`,
    };
  }
  // The sandbox kills a session uid's processes and removes its files through perl (session-user-helper.ts).
  if (LINUX_SYSCALLS[process.arch] === undefined) {
    return {
      available: false,
      setprivPath: setpriv,
      warnings: [],
      reason: `the sandbox's helpers that work as a session's uid know the syscall numbers of x86-64 and arm64, not ${process.arch}'s`,
    };
  }
  if (systemCommand("perl") === undefined) {
    return {
      available: false,
      setprivPath: setpriv,
      warnings: [],
      reason:
        "no perl in /usr/bin or /bin, through which the sandbox kills a session's processes and removes its files: install perl-base",
    };
  }
  const sessions = path.join(options.root, "sessions");
  const { base, count } = options.range;
  const { bwrapPath } = options;
  for (const trialUid of new Set([base, base + count - 1])) {
    if (bwrapPath !== undefined) {
      const trial = await trySandbox({ bwrapPath, user: { uid: trialUid, gid: trialUid, setprivPath: setpriv } });
      if (trial.ok) continue;
      return {
        available: false,
        setprivPath: setpriv,
        warnings: [],
        reason: `bubblewrap cannot run a session under uid ${trialUid} here (${trial.output}); set OZ0_SANDBOX_UID_BASE and OZ0_SANDBOX_UID_COUNT to uids this host can use`,
      };
    }
    const trial = await run(setpriv, [
      ...setprivUserArgs({ uid: trialUid, gid: trialUid }),
      "--",
      "/bin/sh",
      "-c",
      'cd -- "$1"',
      "sh",
      sessions,
    ]);
    if (trial.ok) continue;
    const closed = closedToOtherUsers(sessions, { execute: false });
    const reason =
      closed !== undefined
        ? `${closed.path} (mode ${closed.mode.toString(8).padStart(4, "0")}) does not let other users through to the sandbox root ${options.root}: ` +
          "put OZ0_SANDBOX_ROOT where every directory on the way lets other users pass (o+x), such as /var/lib/oz0-sandbox"
        : `a process cannot run as uid ${trialUid} here (${trial.output}); set OZ0_SANDBOX_UID_BASE and OZ0_SANDBOX_UID_COUNT to uids this host can use`;
    return { available: false, setprivPath: setpriv, warnings: [], reason };
  }
  return { available: true, setprivPath: setpriv, warnings: rangeWarnings(options.range) };
}

/** What on this host may share a session's uid, or let it reach a file it cannot read. */
function rangeWarnings(range: SessionUidRange): string[] {
  const warnings: string[] = [];
  const last = range.base + range.count - 1;
  const inRange = (id: number): boolean => id >= range.base && id <= last;
  const read = (file: string): string => {
    try {
      return readFileSync(file, "utf8");
    } catch {
      return "";
    }
  };
  if (read("/proc/sys/fs/protected_hardlinks").trim() === "0") {
    warnings.push(
      "fs.protected_hardlinks is 0: a session could hard-link a file it cannot read into its working directory and get it back in its patch; set it to 1",
    );
  }
  for (const [file, field] of [
    ["/etc/passwd", 2],
    ["/etc/group", 2],
  ] as const) {
    for (const line of read(file).split("\n")) {
      const fields = line.split(":");
      const id = Number(fields[field]);
      if (fields.length > field && inRange(id))
        warnings.push(
          `${file} has ${fields[0]} with id ${id}, inside the session uid range ${range.base}-${last}; move the range (OZ0_SANDBOX_UID_BASE)`,
        );
    }
  }
  for (const file of ["/etc/subuid", "/etc/subgid"]) {
    for (const line of read(file).split("\n")) {
      const [owner, start, size] = line.split(":");
      const first = Number(start);
      const n = Number(size);
      if (!Number.isInteger(first) || !Number.isInteger(n) || n <= 0) continue;
      if (first <= last && first + n - 1 >= range.base) {
        warnings.push(
          `${file} gives ${owner} ids ${first}-${first + n - 1}, overlapping the session uid range ${range.base}-${last}; move the range (OZ0_SANDBOX_UID_BASE)`,
        );
      }
    }
  }
  return warnings;
}
