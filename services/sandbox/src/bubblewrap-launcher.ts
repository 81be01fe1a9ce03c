// Runs harnesses under bubblewrap: own mount, PID, network, IPC, UTS and
// user namespaces, every capability dropped, an environment of exactly the
// allowlisted variables, the working and state directories writable, a few
// system directories read-only and everything else (other sessions, /root,
// the node's /tmp, the sandbox's files) absent. The sandbox root, its
// parent (the stack's data directory) and the configured hidden paths stay
// absent even when a read-only path contains them (bubblewrap-mounts.ts).
//
// Signals: a SIGTERM to bwrap tears the whole PID namespace down at once, so
// the harness would never get its grace. `--info-fd` tells the pid (on the
// node) of the namespace's init; the harness and everything it starts share
// that init's process group (bwrap --new-session), and the init ignores
// signals it has no handler for. So terminate() signals that group, and
// kill() SIGKILLs bwrap and the init, which takes the namespace with it.
import { spawn, type ChildProcess, type SpawnOptions, type StdioOptions } from "node:child_process";
import { closeSync, existsSync, lstatSync, openSync, readFileSync, realpathSync } from "node:fs";
import path from "node:path";
import type { Readable } from "node:stream";
import { planMounts, isWithin, type BindMount, type MountPlan } from "./bubblewrap-mounts.js";
import { findCommand, SYSTEM_PROGRAM_FOLDERS } from "@oz0/harness/host";
import type { HarnessLauncher, LaunchedHarness, LaunchSpec, PipedChildProcess } from "@oz0/harness/host";
import type { KeptChild } from "./session-keeper.js";
import { withProcessLimit, withProcessLimitAndInit, type SessionProcessLimit } from "./session-process-limit.js";
import { assertReachableBy, setprivUserArgs } from "./session-user-launcher.js";
import type { SessionUser } from "./session-user-processes.js";
import {
  gatedOnNamespaceLimits,
  writeNamespaceLimits,
  type SessionNamespaceLimits,
} from "./session-namespace-limits.js";
import { sessionSyscallFilter } from "./syscall-filter.js";

/** System paths bound read-only when they exist; /etc only in part, since it can hold secrets. */
export const DEFAULT_READ_ONLY_PATHS: readonly string[] = [
  ...SYSTEM_PROGRAM_FOLDERS,
  "/etc/alternatives",
  "/etc/ssl",
  "/etc/ca-certificates",
  "/etc/pki",
  "/etc/resolv.conf",
  "/etc/hosts",
  "/etc/nsswitch.conf",
  "/etc/passwd",
  "/etc/group",
  "/etc/localtime",
  "/etc/ld.so.cache",
  "/etc/ld.so.conf",
  "/etc/ld.so.conf.d",
];

export interface BubblewrapDetection {
  available: boolean;
  /** The bwrap binary that worked. */
  path?: string;
  version?: string;
  /** Why it is not available, for logs and health. */
  reason?: string;
  /** The seccomp filter's program sessions run under (syscall-filter.ts), when bwrap loaded it in the trial. */
  syscallFilter?: string;
  /** Why sessions run without the filter. */
  syscallFilterReason?: string;
}

/** What each bwrap tried in this process found: the embedded stack's sandbox and orchestrator both ask. */
const detections = new Map<string, Promise<BubblewrapDetection>>();

/**
 * Tries a real sandbox with every namespace this launcher uses; bwrap being
 * installed is not enough (user namespaces may be off). Once a process: each
 * try spawns bwrap twice.
 */
export function detectBubblewrap(options: { bwrapPath?: string } = {}): Promise<BubblewrapDetection> {
  const key = options.bwrapPath ?? "";
  let found = detections.get(key);
  if (!found) {
    found = tryBubblewrap(options);
    detections.set(key, found);
  }
  return found;
}

async function tryBubblewrap(options: { bwrapPath?: string }): Promise<BubblewrapDetection> {
  const candidates =
    options.bwrapPath !== undefined ? [options.bwrapPath] : ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"];
  const bwrap = candidates.find((candidate) => existsSync(candidate));
  if (bwrap === undefined)
    return {
      available: false,
      reason: `bwrap not found (looked at ${candidates.join(", ")}); install the bubblewrap package`,
    };
  const version = await runBwrap(bwrap, ["--version"]);
  const filter = sessionSyscallFilter();
  let trial = await trySandbox({ bwrapPath: bwrap, syscallFilter: filter.program });
  let filterReason = filter.reason;
  if (!trial.ok && filter.program !== undefined) {
    // A kernel without seccomp filters (CONFIG_SECCOMP_FILTER) still gets bubblewrap's namespaces, said in the start-up line.
    const unfiltered = await trySandbox({ bwrapPath: bwrap });
    if (unfiltered.ok) filterReason = `bwrap could not load it: ${trial.output || "it failed"}`;
    trial = unfiltered;
  }
  if (!trial.ok)
    return {
      available: false,
      path: bwrap,
      reason: `bwrap cannot create a sandbox on this host: ${trial.output || "it failed"}`,
    };
  return {
    available: true,
    path: bwrap,
    version: version.output,
    ...(filterReason === undefined ? { syscallFilter: filter.program } : { syscallFilterReason: filterReason }),
  };
}

/** Runs bwrap to its end (10 s at most); `readFile` is its fd 3, for `--seccomp 3`. */
function runBwrap(
  bwrapPath: string,
  args: readonly string[],
  readFile?: string,
): Promise<{ ok: boolean; output: string }> {
  return new Promise((resolve) => {
    let output = "";
    const child = spawnReading(
      bwrapPath,
      args,
      { env: {}, timeout: 10_000, stdio: ["ignore", "pipe", "pipe"] },
      readFile,
    );
    for (const stream of [child.stdout, child.stderr]) {
      stream?.setEncoding("utf8");
      stream?.on("data", (chunk: string) => (output += chunk));
    }
    child.on("error", (error) => resolve({ ok: false, output: error.message }));
    child.on("close", (code, signal) =>
      resolve({ ok: code === 0, output: output.trim() || (code === 0 ? "" : `exit ${code ?? signal}`) }),
    );
  });
}

/** `spawn`, with `readFile` (when given) opened for reading as the stdio entry after `options.stdio`'s. */
export function spawnReading(
  file: string,
  args: readonly string[],
  options: SpawnOptions,
  readFile?: string,
): ChildProcess {
  if (readFile === undefined) return spawn(file, args, options);
  const fd = openSync(readFile, "r");
  try {
    return spawn(file, args, { ...options, stdio: [...(options.stdio as StdioOptions[]), fd] as StdioOptions });
  } finally {
    // The child has its own copy from the spawn on.
    closeSync(fd);
  }
}

/**
 * Runs `true` in a sandbox with the namespaces and mounts every session has (the system paths, /tmp, /proc and its
 * read-only parts, /dev); under `user`'s uid the way a root sandbox runs sessions under their own uids.
 */
export function trySandbox(options: {
  bwrapPath: string;
  user?: (SessionUser & { setprivPath: string }) | undefined;
  /** The seccomp filter's program, loaded as sessions load it. */
  syscallFilter?: string | undefined;
}): Promise<{ ok: boolean; output: string }> {
  const truePath = ["/usr/bin/true", "/bin/true"].find((p) => existsSync(p)) ?? "true";
  const { user, syscallFilter } = options;
  return runBwrap(
    options.bwrapPath,
    [
      ...namespaceArgs(user !== undefined),
      "--clearenv",
      ...planMounts({ binds: DEFAULT_READ_ONLY_PATHS.map((source) => ({ source, optional: true })), hidden: [] }).args,
      ...(syscallFilter !== undefined ? ["--seccomp", "3"] : []),
      "--",
      ...(user !== undefined ? [user.setprivPath, ...setprivUserArgs(user), "--"] : []),
      truePath,
    ],
    syscallFilter,
  );
}

/**
 * The namespaces and capabilities of a session: all of bwrap's namespaces and no capability; with `underOwnUid`
 * (a root sandbox, setpriv dropping the session to its uid inside) no user namespace, which root needs none of to
 * mount, and what setpriv needs to drop to the uid, its groups and an empty bounding set, gone with setpriv's exec;
 * and to pass directories closed to root without capabilities: bwrap enters the working directory (--chdir), the
 * session uid's and private to it, as root before setpriv runs.
 */
function namespaceArgs(underOwnUid: boolean): string[] {
  return [
    ...(underOwnUid
      ? ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
      : ["--unshare-all"]),
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    ...(underOwnUid
      ? ["CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH"].flatMap((cap) => ["--cap-add", cap])
      : []),
  ];
}

export interface BubblewrapLauncherOptions {
  bwrapPath: string;
  /** System and tool paths visible read-only (the harness's runtime, for example). */
  readOnlyPaths: readonly string[];
  /** The plugin directory, read-only. */
  pluginDir: string;
  /** Writable: the working and state directories. */
  writablePaths: readonly string[];
  /** Never visible, even inside a read-only path (OZ0_SANDBOX_HIDDEN_PATHS, OZ0_HOME). */
  hiddenPaths: readonly string[];
  /** The sandbox root: it and its parent are hidden too, unless bound themselves; the session's own directories are bound again inside. */
  sandboxRoot: string;
  /**
   * The in-sandbox LLM forwarder (sandbox-entry.ts's command): runs first and then the harness. Each forward's `mount`
   * (the folder of its socket) is bound read-only inside.
   */
  entry?: {
    command: readonly string[];
    forwards: { innerPort: number; innerSocketPath: string; mount: { source: string; dest: string } }[];
  };
  /** At most this many processes and threads in the session at once (session-process-limit.ts). */
  processLimit?: SessionProcessLimit | undefined;
  /**
   * The session's own uid, for a sandbox running as root: bwrap then makes no user namespace (root needs none to
   * mount), and setpriv drops the session to the uid before anything of it runs, so it is never uid 0 of the node.
   */
  user?: (SessionUser & { setprivPath: string }) | undefined;
  /** The seccomp filter's program (syscall-filter.ts): bwrap loads it before the session's first command runs. */
  syscallFilter?: string | undefined;
  /**
   * The session's shares of the per-user counts its user namespace draws on with every other session's
   * (session-namespace-limits.ts), for a session in a namespace of the sandbox's user; undefined: not lowered.
   */
  namespaceLimits?: SessionNamespaceLimits | undefined;
  /** Told when a session's shares could not be written; the session is killed then, before anything of it ran. */
  onNamespaceLimitsFailed?: (error: Error) => void;
  /**
   * Starts bwrap; default `child_process.spawn`. The sandbox passes its keeper's, so the session outlives a restart of
   * the sandbox. `readFile`, when given, is opened for reading as the stdio entry after `options.stdio`'s.
   */
  spawn?: (file: string, args: readonly string[], options: SpawnOptions, readFile?: string) => ChildProcess | KeptChild;
}

/** bwrap processes a launcher started that may still run; SIGKILLed when the sandbox process exits. */
const liveBwraps = new Set<number>();
let exitHookInstalled = false;

function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone: nothing to stop.
  }
}

/**
 * The node finds the command, but inside the sandbox only the bound paths
 * exist: refused here with what to do, rather than as a harness that could
 * not start (ENOENT from inside, with no hint why). The command's link
 * target must be visible too (node_modules/.bin links into the package).
 */
function assertVisible(command: string, mounts: MountPlan): void {
  let target = command;
  try {
    target = realpathSync.native(command);
  } catch {
    // Unreadable link: the literal path decides.
  }
  const hidden = [command, target].find((file) => !mounts.visible(file));
  if (hidden === undefined) return;
  throw new Error(
    `the harness command ${command}${target !== command ? ` (${target})` : ""} is not visible inside the sandbox, where bubblewrap shows only the system paths, ` +
      "node, the plugin, the session's own directories and OZ0_SANDBOX_READ_ONLY_PATHS, never the sandbox root, its parent or OZ0_SANDBOX_HIDDEN_PATHS: " +
      "add the directory it is installed in (with its node_modules) to OZ0_SANDBOX_READ_ONLY_PATHS (':'-separated), outside the hidden ones",
  );
}

/** The innermost bind that holds `file`: a session under a uid of its own passes the folders above it (bwrap's). */
function innermostBind(binds: readonly BindMount[], file: string): string | undefined {
  return binds.filter((b) => isWithin(file, b.source)).sort((a, b) => b.source.length - a.source.length)[0]?.source;
}

/**
 * Where a plugin's JavaScript dependencies are when its folder links to them: the orchestrator's copy of a plugin
 * gets a `node_modules` link to the nearest node_modules above its source (plugin-registry.ts), which lies outside
 * the plugin's folder, so a harness importing a package found nothing under bubblewrap. Bound read-only like the
 * plugin (hidden paths in it stay hidden); undefined when the folder has no such link.
 */
function pluginModules(pluginDir: string): string | undefined {
  const link = path.join(pluginDir, "node_modules");
  try {
    if (!lstatSync(link).isSymbolicLink()) return undefined;
    return realpathSync.native(link);
  } catch {
    return undefined; // none, or a dangling link: nothing to bind
  }
}

/**
 * The pid (on the node) of the namespace's init, from what bwrap wrote to its
 * --info-fd; undefined until it has. A kept session's info is its keeper's
 * file fd3, where a restarted sandbox reads it again (what SIGTERM goes to).
 */
export function initPidFromInfo(info: string): number | undefined {
  const match = /"child-pid"\s*:\s*(\d+)/.exec(info);
  return match?.[1] !== undefined ? Number(match[1]) : undefined;
}

/** The init's pid from the file a kept session's bwrap wrote its --info-fd to; undefined while it holds none. */
export function initPidFromInfoFile(file: string): number | undefined {
  try {
    return initPidFromInfo(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
}

export function bubblewrapLauncher(options: BubblewrapLauncherOptions): HarnessLauncher {
  return {
    launch(spec: LaunchSpec): LaunchedHarness {
      if (spec.command.length === 0) throw new Error("the harness command is empty");
      // Inside, the filesystem is a subset of the node's: what is not found here is not found there.
      const found = findCommand(spec);
      if (found === undefined) throw new Error("no such executable on the session's PATH (ENOENT)");
      const nodeDir = path.dirname(process.execPath);
      const binds: BindMount[] = options.readOnlyPaths.map((p) => ({ source: p, optional: true }));
      if (!options.readOnlyPaths.some((p) => isWithin(nodeDir, p))) binds.push({ source: nodeDir });
      if (options.pluginDir !== "") {
        binds.push({ source: options.pluginDir });
        const modules = pluginModules(options.pluginDir);
        if (modules !== undefined) binds.push({ source: modules, optional: true });
      }
      for (const p of options.writablePaths) binds.push({ source: p, writable: true });
      let command = spec.command;
      if (options.entry !== undefined) {
        // Read-only: the entry only connects to the sockets there, which a read-only mount allows. The
        // harness can then neither plant a file nor mark the folder (mode, xattr, ACL): an origin's folder is
        // shared by the sessions that use it (llm-forwarder.ts), a session's own is kept with its internal
        // folder for a later session (InternalDirectoryPool).
        const mounted = new Set<string>();
        for (const { mount } of options.entry.forwards) {
          if (mounted.has(mount.dest)) continue;
          mounted.add(mount.dest);
          binds.push({ source: mount.source, dest: mount.dest });
        }
        command = [
          ...options.entry.command,
          ...options.entry.forwards.map((f) => `${f.innerPort}=${f.innerSocketPath}`),
          "--",
          ...spec.command,
        ];
      }
      const { user } = options;
      const namespaceLimits = user === undefined ? options.namespaceLimits : undefined;
      if (user === undefined) {
        // Inside the session's own user namespace, where the kernel counts its processes apart; bwrap's init too
        // (session-process-limit.ts).
        command = withProcessLimitAndInit(options.processLimit, command);
        // A namespace of the sandbox's user: nothing runs until its shares are written (below, once bwrap made it).
        if (namespaceLimits !== undefined) command = gatedOnNamespaceLimits(namespaceLimits, command);
      } else
        // The limit set while root, then the session's uid, whose processes the kernel counts apart: nothing runs as
        // the uid without the limit (bwrap's init stays root's, which the uid can neither ptrace nor signal).
        command = withProcessLimit(options.processLimit, [
          user.setprivPath,
          ...setprivUserArgs(user),
          "--",
          ...command,
        ]);
      const mounts = planMounts({
        binds,
        hidden: options.hiddenPaths,
        hiddenUnlessBound: [options.sandboxRoot, path.dirname(options.sandboxRoot)],
        // Its TMPDIR, in its state directory (bound writable at its own path): on disk, not in memory.
        tmp: spec.env.TMPDIR,
      });
      assertVisible(found, mounts);
      if (user !== undefined) {
        // It reads the bound folders as any other user of the node.
        const from = (file: string): string | undefined => innermostBind(binds, file);
        assertReachableBy(found, { what: "the harness command", uid: user.uid, execute: true, from });
        if (options.pluginDir !== "")
          // Passable (o+x), as a folder is searched.
          assertReachableBy(options.pluginDir, { what: "the plugin folder", uid: user.uid, execute: true, from });
      }
      // The session's environment is bwrap's own, which it hands on as it is: not --setenv arguments, which sit in
      // bwrap's command line (/proc/<pid>/cmdline), readable by every user of the node, the session token among
      // them (attacker review). Its /proc/<pid>/environ is its owner's alone.
      const args = [...namespaceArgs(user !== undefined), "--hostname", "oz0-sandbox", ...mounts.args];
      // stdin, stdout, stderr and the --info-fd; the filter's program comes next (spawnReading, the keeper), which
      // bwrap reads and closes before anything of the session runs.
      const stdio: "pipe"[] = ["pipe", "pipe", "pipe", "pipe"];
      if (options.syscallFilter !== undefined) args.push("--seccomp", String(stdio.length));
      args.push("--chdir", spec.cwd, "--info-fd", "3", "--", ...command);

      const child = (options.spawn ?? spawnReading)(
        options.bwrapPath,
        args,
        { cwd: spec.cwd, env: spec.env, detached: true, stdio },
        options.syscallFilter,
      );
      const bwrapPid = child.pid;
      if (bwrapPid !== undefined) {
        liveBwraps.add(bwrapPid);
        if (!exitHookInstalled) {
          exitHookInstalled = true;
          process.on("exit", () => {
            for (const pid of liveBwraps) killQuietly(pid, "SIGKILL");
          });
        }
      }
      child.on("exit", () => {
        if (bwrapPid !== undefined) liveBwraps.delete(bwrapPid);
      });

      // The namespace init's pid, from bwrap's --info-fd JSON.
      const infoStream = child.stdio[3] as Readable | null;
      const initPid = new Promise<number | undefined>((resolve) => {
        if (infoStream === null) return resolve(undefined);
        let text = "";
        infoStream.setEncoding("utf8");
        infoStream.on("data", (chunk: string) => {
          text += chunk;
          const pid = initPidFromInfo(text);
          if (pid !== undefined) {
            resolve(pid);
            // A kept session's info file is no longer followed. A pipe is drained instead: bwrap may still
            // write to it, and a write to a pipe closed here would end bwrap by SIGPIPE.
            if (options.spawn !== undefined) infoStream.destroy();
            else {
              infoStream.removeAllListeners("data");
              infoStream.resume();
            }
          }
        });
        infoStream.on("error", () => resolve(undefined));
        infoStream.on("close", () => resolve(undefined));
        child.on("exit", () => resolve(undefined));
      });

      // Once bwrap has exited its namespace is gone, and the init's pid may be reused.
      const exited = (): boolean => child.exitCode !== null || child.signalCode !== null;
      if (namespaceLimits !== undefined)
        void initPid.then(async (pid) => {
          if (pid === undefined || exited()) return;
          try {
            await writeNamespaceLimits(namespaceLimits, pid);
          } catch (error) {
            if (exited()) return;
            options.onNamespaceLimitsFailed?.(error as Error);
            killQuietly(pid, "SIGKILL");
            if (bwrapPid !== undefined) killQuietly(bwrapPid, "SIGKILL");
          }
        });
      return {
        child: child as unknown as PipedChildProcess,
        async terminate() {
          const pid = await initPid;
          if (pid === undefined || exited()) return;
          try {
            process.kill(-pid, "SIGTERM");
          } catch {
            // The group is gone: the harness has exited already.
          }
        },
        async kill() {
          if (exited()) return;
          const pid = await Promise.race([initPid, Promise.resolve(undefined)]);
          if (pid !== undefined) killQuietly(pid, "SIGKILL");
          if (bwrapPid !== undefined) killQuietly(bwrapPid, "SIGKILL");
        },
        // When the harness exits, the namespace's init exits and the kernel
        // kills whatever else ran in it: nothing can be left behind.
        hasLiveProcesses() {
          return false;
        },
      };
    },
  };
}
