// Runs a harness under its session's unprivileged uid (the `user` isolation
// mode). setpriv (util-linux) drops root and execs the harness, so it
// composes with the process-group launcher as the parent-death one does: the
// pid and the process group are the harness's own, and the sandbox (root)
// signals them as before. Besides the uid and gid, setpriv clears the
// supplementary groups, forbids gaining privileges again (no setuid binary or
// file capability lifts the harness back), empties the capability bounding
// and inheritable sets, and sets the parent-death signal last: a change of
// uid clears it, so it must come after.
import { realpathSync, statSync } from "node:fs";
import path from "node:path";
import { findCommand, processGroupLauncher, type HarnessLauncher } from "@oz0/harness/host";
import type { SessionUser } from "./session-user-processes.js";
import { withProcessLimit, type SessionProcessLimit } from "./session-process-limit.js";
import { filteredCommand, type UserModeSyscallFilter } from "./syscall-filter.js";
import { sessionDomainCommand, type Landlock } from "./landlock-launcher.js";
import { sessionWritablePaths } from "./session-write-rule.js";

/**
 * The Landlock domain a `user`-mode session runs in (landlock-launcher.ts's sessionDomainCommand), entered as root
 * before setpriv drops to the uid: it stays through every exec and change of uid after.
 */
export interface UserModeDomain {
  landlock: Landlock;
  /** TCP sockets bind port 0 alone: the session listens only where the kernel picks (session-listen-ports.ts). */
  kernelPortsOnly: boolean;
  /** The session changes the file system only beneath its own directories and the shared places (session-write-rule.ts). */
  confinedWrites: boolean;
}

/** setpriv's arguments that make the rest of the command run as `user`, unprivileged for good. */
export function setprivUserArgs(user: SessionUser): string[] {
  return [
    `--reuid=${user.uid}`,
    `--regid=${user.gid}`,
    "--clear-groups",
    "--no-new-privs",
    "--inh-caps=-all",
    "--bounding-set=-all",
  ];
}

/**
 * The first directory on the way to `file` that other users cannot pass
 * (or `file` itself when they cannot run it), judged by the mode bits: the
 * session's uid owns none of them and has no group but its own.
 */
export function closedToOtherUsers(
  file: string,
  options: {
    execute: boolean;
    /** The first directory to judge: those above it are not on the way (bubblewrap makes a bound folder's own, 0755). */
    from?: string;
  },
): { path: string; mode: number } | undefined {
  const ancestors: string[] = [];
  const { from } = options;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    if (from !== undefined && from !== "/" && dir !== from && !dir.startsWith(`${from}/`)) break;
    ancestors.unshift(dir);
    if (dir === path.dirname(dir)) break;
  }
  for (const dir of ancestors) {
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o001) === 0) return { path: dir, mode };
  }
  const mode = statSync(file).mode & 0o7777;
  return options.execute && (mode & 0o001) === 0 ? { path: file, mode } : undefined;
}

/**
 * A harness command or plugin folder the session's uid could not reach is
 * refused before anything starts, naming the folder in the way, rather than
 * as a harness that exited with EACCES (or setpriv's "Permission denied").
 * The path as given and where its links lead are both walked; `from` gives,
 * for each, the first folder that counts (under bubblewrap the bind's that
 * holds it: bwrap makes the folders above a bound one passable), else `/`.
 */
export function assertReachableBy(
  file: string,
  options: { what: string; uid: number; execute: boolean; from?: (path: string) => string | undefined },
): void {
  let target = file;
  try {
    target = realpathSync.native(file);
  } catch {
    // Unreadable link: the literal path decides.
  }
  for (const walked of new Set([file, target])) {
    const from = options.from?.(walked);
    const closed = closedToOtherUsers(walked, { execute: options.execute, ...(from !== undefined ? { from } : {}) });
    if (closed === undefined) continue;
    throw new Error(
      `${options.what} ${file}${target !== file ? ` (${target})` : ""} cannot be reached by the session's own uid ${options.uid}: ` +
        `${closed.path} (mode ${closed.mode.toString(8).padStart(4, "0")}) does not let other users through; ` +
        "install the harness, node and the plugin where every user can read them (o+rx on their folders)",
    );
  }
}

/**
 * `killAll`, when given, replaces the SIGKILL to the process group once the
 * harness has exited: it kills every process of the uid, so a process that
 * left the group and holds the harness's stdout does not keep the session
 * open for the grace (not for a session sharing another's uid: that one's
 * processes are the other session's too).
 */
export function sessionUserLauncher(options: {
  setprivPath: string;
  user: SessionUser;
  /** The folder of the plugin the harness comes from, which the uid must reach as well as the command. */
  pluginDir?: string | undefined;
  killAll?: () => Promise<void>;
  /** At most this many processes and threads of the session's uid at once (session-process-limit.ts). */
  processLimit?: SessionProcessLimit | undefined;
  /** The seccomp filter the harness runs under, loaded by perl as root just before setpriv drops to the uid (syscall-filter.ts). */
  syscallFilter?: UserModeSyscallFilter | undefined;
  /** The Landlock domain the harness runs in, when the kernel has one to give. */
  domain?: UserModeDomain | undefined;
  /** The session's working and state directories: where, with the shared places, a confined session may write. */
  paths: { workingDir: string; stateDir: string };
}): HarnessLauncher {
  const inner = processGroupLauncher();
  return {
    launch(spec) {
      const found = findCommand(spec);
      // A command that cannot run is started as is, so the host reports spawn_failed rather than setpriv's exit code.
      if (found === undefined) return inner.launch(spec);
      assertReachableBy(found, { what: "the harness command", uid: options.user.uid, execute: true });
      if (options.pluginDir)
        assertReachableBy(options.pluginDir, { what: "the plugin folder", uid: options.user.uid, execute: true });
      const launched = inner.launch({
        ...spec,
        // The limit is set while root, before setpriv changes the uid: from its exec on, a process of the uid can
        // ptrace it (session-user-helper.ts), and one that ran as the uid before its limit could fork past it. The
        // kernel counts the processes of the uid each runs as, whenever the limit was set.
        // The filter is loaded while root too, which reads its program wherever the sandbox is installed (the uid may
        // not pass the folders); it stays through setpriv and the harness's exec. So does the Landlock domain that keeps
        // the session off the node's service ports and its writes in its own places, entered first.
        command: withProcessLimit(
          options.processLimit,
          confined(options, [
            options.setprivPath,
            ...setprivUserArgs(options.user),
            "--pdeathsig",
            "SIGKILL",
            "--",
            ...spec.command,
          ]),
        ),
      });
      const { killAll } = options;
      if (killAll === undefined) return launched;
      const { child } = launched;
      return {
        child,
        terminate: () => launched.terminate(),
        kill: () => (child.exitCode !== null || child.signalCode !== null ? killAll() : launched.kill()),
        hasLiveProcesses: () => launched.hasLiveProcesses?.() === true,
      };
    },
  };
}

/** `command` in the session's domain and under the filter, each where there is one: one perl enters both. */
function confined(
  options: {
    domain?: UserModeDomain | undefined;
    syscallFilter?: UserModeSyscallFilter | undefined;
    paths: { workingDir: string; stateDir: string };
  },
  command: string[],
): string[] {
  const { domain, syscallFilter: filter } = options;
  if (domain !== undefined)
    return sessionDomainCommand(domain.landlock, {
      kernelPortsOnly: domain.kernelPortsOnly,
      writable: domain.confinedWrites ? sessionWritablePaths(options.paths) : [],
      filterProgram: filter?.program,
      command,
    });
  return filter !== undefined ? filteredCommand({ ...filter, command }) : command;
}
