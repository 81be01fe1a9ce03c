// Command hooks are the plugin's own programs, run by the orchestrator on its
// host as its own user: without isolation a hook reads whatever the
// orchestrator can, the owner's credential in the data directory among it (an
// attacker review's hook denied a call with that token as its reason). Only
// an admin can let a plugin with command hooks in (--allow-host-hooks), and
// under bubblewrap even that hook sees only the system's read-only paths, its
// plugin's folder (read-only), its own program, a /tmp of its own and a /proc
// of its own processes: not the data directory, not the orchestrator's
// environment or memory, not another process. The network is left as it is:
// a hook may ask a policy service.
import { realpathSync } from "node:fs";
import path from "node:path";
import { DEFAULT_READ_ONLY_PATHS, detectBubblewrap } from "@oz0/sandbox";
import { isWithin } from "../path-within.js";

/** How command hooks run: under bubblewrap, hiding `dataDir`. */
export interface HookIsolation {
  bwrapPath: string;
  /** The orchestrator's data directory (OZ0_HOME), which no hook may see. */
  dataDir: string;
}

/** OZ0_HOOK_ISOLATION: `auto` isolates when bubblewrap works here, `bwrap` insists, `none` runs hooks as they are. */
export type HookIsolationSetting = "auto" | "bwrap" | "none";
export const HOOK_ISOLATION_SETTINGS: readonly HookIsolationSetting[] = ["auto", "bwrap", "none"];

/**
 * The isolation command hooks get on this host, or why they get none. A
 * `bwrap` setting that cannot be met throws, saying why: a guard that was
 * asked for must not be dropped in silence.
 */
export async function chooseHookIsolation(options: {
  setting: HookIsolationSetting;
  dataDir: string;
  /** The bwrap to try; default the usual places. */
  bwrapPath?: string;
}): Promise<{ isolation?: HookIsolation; reason?: string }> {
  if (options.setting === "none") return { reason: "OZ0_HOOK_ISOLATION=none" };
  const found = await detectBubblewrap(options.bwrapPath !== undefined ? { bwrapPath: options.bwrapPath } : {});
  if (found.available && found.path) return { isolation: { bwrapPath: found.path, dataDir: options.dataDir } };
  const reason = `bubblewrap cannot run here: ${found.reason ?? "not found"}`;
  if (options.setting === "bwrap")
    throw new Error(
      `OZ0_HOOK_ISOLATION=bwrap, but ${reason}; install bubblewrap (and allow user namespaces), or set OZ0_HOOK_ISOLATION=auto or none`,
    );
  return { reason };
}

/** The hook's command, run under bubblewrap: what it sees is listed above. */
export function isolatedHookCommand(
  isolation: HookIsolation,
  options: { command: string[]; pluginDir: string },
): string[] {
  const [program] = options.command;
  const binds = DEFAULT_READ_ONLY_PATHS.flatMap((p) => ["--ro-bind-try", p, p]);
  // Its program's folder when it lies elsewhere (node from a version manager): the folder, then where a link leads.
  const programDirs = new Set<string>();
  if (program !== undefined && path.isAbsolute(program)) {
    programDirs.add(path.dirname(program));
    try {
      programDirs.add(path.dirname(realpathSync(program)));
    } catch {
      // Not there: the hook fails to start, and denies, as it would unisolated.
    }
  }
  for (const dir of programDirs) {
    if (DEFAULT_READ_ONLY_PATHS.some((p) => isWithin(dir, p)) || isWithin(dir, isolation.dataDir)) continue;
    binds.push("--ro-bind", dir, dir);
  }
  return [
    isolation.bwrapPath,
    "--die-with-parent",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    ...binds,
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    "--tmpfs",
    "/tmp",
    // Hidden, should a read-only path above hold it; then the plugin's own folder inside it, read-only.
    "--tmpfs",
    isolation.dataDir,
    "--ro-bind",
    options.pluginDir,
    options.pluginDir,
    "--chdir",
    options.pluginDir,
    "--",
    ...options.command,
  ];
}
