// Command hooks are the plugin's own programs, run by the orchestrator on its
// host as its own user: without isolation a hook reads whatever the
// orchestrator can, the owner's credential in the data directory among it (an
// attacker review's hook denied a call with that token as its reason). Only
// an admin can let a plugin with command hooks in (--allow-host-hooks), and
// isolated even that hook reads only the system's read-only paths, its
// plugin's folder, its own program and a temporary folder of its own: not the
// data directory, not the orchestrator's environment or memory, not another
// process. The network is left as it is: a hook may ask a policy service.
// Two ways give that. Bubblewrap shows the hook a file system made of those
// paths alone, with a /proc of its own processes. Where bubblewrap cannot run
// (a Kubernetes pod, which may not make user namespaces), a Landlock domain
// leaves the host's file system in place but walls the hook in: it may open
// nothing beneath any other path (the host's /proc included), ptrace no
// process outside, and from Linux 6.12 signal none. Sharing the host's network,
// a hook (or what it leaves running) could listen on a stopped service's port
// and be sent its callers' bearer credentials: where the kernel's Landlock has
// rules on ports (Linux 6.7+) hooks listen only where the kernel picks, as the
// sandbox's user-mode sessions do, and under the sessions' seccomp filter
// either way, which refuses the Multipath TCP sockets those rules miss.
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  DEFAULT_READ_ONLY_PATHS,
  detectBubblewrap,
  detectLandlock,
  detectListenPortsDomain,
  detectUserModeSyscallFilter,
  listenPortsCommand,
  PROC_READ_ONLY,
  walledCommand,
  type Landlock,
} from "@oz0/sandbox";
import { isWithin } from "../path-within.js";

/** How command hooks run; either way `dataDir`, the orchestrator's data directory (OZ0_HOME), is out of their reach. */
export type HookIsolation = ({ kind: "bwrap"; bwrapPath: string } | { kind: "landlock"; landlock: Landlock }) & {
  dataDir: string;
  /**
   * The sandbox's seccomp program for sessions (@oz0/sandbox's syscall-filter.ts), when it loads here: by bwrap, or
   * by the perl that enters the Landlock domain.
   */
  syscallFilter?: string | undefined;
  /** Where the kernel can keep hooks listening on ports it picks: the perl that enters such a domain. */
  kernelPorts?: Landlock | undefined;
};

/**
 * OZ0_HOOK_ISOLATION: `auto` isolates under bubblewrap where it works, else
 * in a Landlock domain where that works; `bwrap` and `landlock` insist on
 * theirs; `none` runs hooks as they are.
 */
export type HookIsolationSetting = "auto" | "bwrap" | "landlock" | "none";
export const HOOK_ISOLATION_SETTINGS: readonly HookIsolationSetting[] = ["auto", "bwrap", "landlock", "none"];

/**
 * The isolation command hooks get on this host, or why they get none (with
 * Landlock, why not bubblewrap). A setting that cannot be met throws, saying
 * why: a guard that was asked for must not be dropped in silence.
 */
export async function chooseHookIsolation(options: {
  setting: HookIsolationSetting;
  dataDir: string;
  /** The bwrap to try; default the usual places. */
  bwrapPath?: string;
  /** The perl that enters a Landlock domain; default the system's. */
  perlPath?: string;
}): Promise<{ isolation?: HookIsolation; reason?: string }> {
  const { setting, dataDir } = options;
  if (setting === "none") return { reason: "OZ0_HOOK_ISOLATION=none" };
  const perl = options.perlPath !== undefined ? { perlPath: options.perlPath } : {};
  const kernelPorts = detectListenPortsDomain(perl).landlock;
  let bwrapReason: string | undefined;
  if (setting !== "landlock") {
    const found = await detectBubblewrap(options.bwrapPath !== undefined ? { bwrapPath: options.bwrapPath } : {});
    if (found.available && found.path)
      return {
        isolation: { kind: "bwrap", bwrapPath: found.path, dataDir, syscallFilter: found.syscallFilter, kernelPorts },
      };
    bwrapReason = `bubblewrap cannot run here: ${found.reason ?? "not found"}`;
    if (setting === "bwrap")
      throw new Error(
        `OZ0_HOOK_ISOLATION=bwrap, but ${bwrapReason}; install bubblewrap (and allow user namespaces), or set OZ0_HOOK_ISOLATION=auto, landlock or none`,
      );
  }
  const landlock = landlockFor(dataDir, options.perlPath);
  if (landlock.isolation)
    return {
      isolation: { ...landlock.isolation, kernelPorts },
      ...(bwrapReason ? { reason: bwrapReason } : {}),
    };
  if (setting === "landlock")
    throw new Error(
      `OZ0_HOOK_ISOLATION=landlock, but ${landlock.reason}; use a kernel with Landlock (Linux 5.13+), or set OZ0_HOOK_ISOLATION=auto, bwrap or none`,
    );
  return { reason: `${bwrapReason}; ${landlock.reason}` };
}

function landlockFor(dataDir: string, perlPath?: string): { isolation?: HookIsolation; reason?: string } {
  // A domain only allows: it cannot hide a folder beneath a path it lets hooks read.
  const holder = DEFAULT_READ_ONLY_PATHS.find((p) => isWithin(dataDir, p));
  if (holder !== undefined)
    return { reason: `a Landlock domain cannot hide the data directory ${dataDir}, which lies in ${holder}` };
  const found = detectLandlock(perlPath !== undefined ? { perlPath } : {});
  if (found.landlock === undefined) return { reason: `Landlock cannot be used here: ${found.reason}` };
  return {
    isolation: {
      kind: "landlock",
      landlock: found.landlock,
      dataDir,
      syscallFilter: detectUserModeSyscallFilter().filter?.program,
    },
  };
}

/** What the start-up log says of hooks' listening ports and system calls, when either guard is missing. */
export function hookIsolationGaps(isolation: HookIsolation): string[] {
  return [
    ...(isolation.kernelPorts === undefined
      ? ["they may listen on any free port, a stopped service's among them (Landlock's rules on ports need Linux 6.7+)"]
      : []),
    ...(isolation.syscallFilter === undefined
      ? ["they run without the sessions' seccomp filter (user namespaces, io_uring and Multipath TCP sockets allowed)"]
      : []),
  ];
}

/** A hook's command as isolated, what to add to its environment, and what to undo once it ended. */
export interface IsolatedHook {
  command: string[];
  env: Record<string, string>;
  /** A file the command reads at fd 3 (bwrap's --seccomp program), opened by whoever starts it. */
  readFile?: string | undefined;
  /** Removes what the run made (a Landlock hook's temporary folder). */
  dispose(): void;
}

/** The hook's command, run as `isolation` says: what it reads is listed above. */
export function isolatedHook(
  isolation: HookIsolation,
  options: { command: string[]; pluginDir: string },
): IsolatedHook {
  const ownDirs = programDirs(options.command, isolation.dataDir);
  // Its own temporary folder on disk, the one path it may change (under bubblewrap its /tmp): never a tmpfs, which
  // is memory charged to no process (@oz0/sandbox's bubblewrap-mounts.ts).
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-hook-"));
  const dispose = (): void => rmSync(tmp, { recursive: true, force: true });
  if (isolation.kind === "landlock") {
    const walled = walledCommand(isolation.landlock, {
      readOnly: [...DEFAULT_READ_ONLY_PATHS, ...ownDirs, options.pluginDir],
      writable: [tmp, "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"],
      kernelPortsOnly: isolation.kernelPorts !== undefined,
      filterProgram: isolation.syscallFilter,
      command: options.command,
    });
    return { command: walled, env: { TMPDIR: tmp }, dispose };
  }
  const bwrap = [
    isolation.bwrapPath,
    "--die-with-parent",
    // A user namespace of its own and no capability: bwrap run by root (the orchestrator as root) otherwise runs
    // the hook as root with every capability, which could make a device node of the node's disk and mount it.
    "--unshare-user",
    "--cap-drop",
    "ALL",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    ...DEFAULT_READ_ONLY_PATHS.flatMap((p) => ["--ro-bind-try", p, p]),
    ...ownDirs.flatMap((dir) => ["--ro-bind", dir, dir]),
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    // The kernel's settings, which root's uid, even with no capability, could change (@oz0/sandbox's bubblewrap-mounts.ts).
    ...PROC_READ_ONLY.flatMap((p) => ["--ro-bind-try", p, p]),
    "--bind",
    tmp,
    "/tmp",
    // Hidden, should a read-only path above hold it; then the plugin's own folder inside it, read-only.
    "--tmpfs",
    isolation.dataDir,
    "--ro-bind",
    options.pluginDir,
    options.pluginDir,
    // Each tmpfs bwrap made, its root and /dev among them, read-only once all is mounted in it.
    ...["/", "/dev", isolation.dataDir].flatMap((dest) => ["--remount-ro", dest]),
    "--chdir",
    options.pluginDir,
    // A session's filter (no user namespace, keyrings, eBPF or io_uring), read from fd 3 before the hook runs.
    ...(isolation.syscallFilter !== undefined ? ["--seccomp", "3"] : []),
    "--",
    ...options.command,
  ];
  return {
    // In a domain that keeps it off fixed ports: bwrap shares the host's network with the hook, and the domain stays
    // through bwrap's namespaces and the hook's exec.
    command: isolation.kernelPorts !== undefined ? listenPortsCommand(isolation.kernelPorts, bwrap) : bwrap,
    env: {},
    readFile: isolation.syscallFilter,
    dispose,
  };
}

/**
 * Its program's folder when it lies outside the system's paths (node from a
 * version manager): the folder, then where a link leads; never one in the
 * data directory.
 */
function programDirs(command: string[], dataDir: string): string[] {
  const [program] = command;
  const dirs = new Set<string>();
  if (program !== undefined && path.isAbsolute(program)) {
    dirs.add(path.dirname(program));
    try {
      dirs.add(path.dirname(realpathSync(program)));
    } catch {
      // Not there: the hook fails to start, and denies, as it would unisolated.
    }
  }
  return [...dirs].filter((dir) => !DEFAULT_READ_ONLY_PATHS.some((p) => isWithin(dir, p)) && !isWithin(dir, dataDir));
}
