// The cgroup mechanism: each session gets a cgroup v2 of its own, under a
// directory named for the host (one sandbox root, one conformance run) below
// the host's own cgroup. A process cannot leave a cgroup by setsid or a
// double fork, only by being moved, which needs write access to the
// cgroup tree: what the sandbox's root (or the owner of a delegated subtree)
// has, so the `none` isolation mode runs as a user who could. The harness is
// moved in before it can fork: a shell writes its own pid to the session's
// cgroup.procs and then execs the harness (same pid). At the end,
// cgroup.kill SIGKILLs everything inside at once, forks in flight included
// (Linux 5.14 or later), and the directory goes once nothing is left.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { findCommand } from "./command-lookup.js";
import type { HarnessLauncher } from "./process-launcher.js";
import { describeProcess, onHostExit, processesInGroup } from "./process-table.js";
import type { SessionProcess } from "./process-table.js";

/** `sh -c ENTER_SCRIPT oz0-cgroup-enter <cgroup.procs> <command...>`: moves itself in, then becomes the command. */
const ENTER_SCRIPT =
  'echo $$ > "$1" || { echo "oz0: could not move the harness into its cgroup ($1)" >&2; exit 125; }; shift; exec "$@"';
/** How long killed processes may take to leave the cgroup before its directory is left for the next start-up. */
const KILL_WAIT_MS = 5000;
const POLL_MS = 20;

function enterCommand(procsFile: string, command: readonly string[]): string[] {
  return ["/bin/sh", "-c", ENTER_SCRIPT, "oz0-cgroup-enter", procsFile, ...command];
}

/** The cgroup v2 directory this process is in, as mounted here; or why there is none. */
export function ownCgroupDirectory(): { dir: string; reason?: undefined } | { dir?: undefined; reason: string } {
  let own: string | undefined;
  let mountinfo: string;
  try {
    own = /^0::(\/.*)$/m.exec(readFileSync("/proc/self/cgroup", "utf8"))?.[1];
    mountinfo = readFileSync("/proc/self/mountinfo", "utf8");
  } catch (error) {
    return {
      reason: `cannot read /proc/self/cgroup or /proc/self/mountinfo (${(error as NodeJS.ErrnoException).code ?? "error"})`,
    };
  }
  if (own === undefined) return { reason: "this process is in no cgroup v2 hierarchy" };
  for (const line of mountinfo.split("\n")) {
    const [before, after] = line.split(" - ");
    if (after?.split(" ")[0] !== "cgroup2") continue;
    const fields = (before ?? "").split(" ");
    // mountinfo escapes spaces and the like as octal.
    const unescape = (text: string): string =>
      text.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(parseInt(octal, 8)));
    const root = unescape(fields[3] ?? "");
    const mountPoint = unescape(fields[4] ?? "");
    const relative = path.posix.relative(root, own);
    if (relative.startsWith("..")) continue;
    const dir = path.join(mountPoint, relative);
    if (existsSync(dir)) return { dir };
  }
  return { reason: `no cgroup2 mount shows this process's cgroup ${own}` };
}

function isPopulated(dir: string): boolean {
  try {
    return /^populated 1$/m.test(readFileSync(path.join(dir, "cgroup.events"), "utf8"));
  } catch {
    return false;
  }
}

/** Every pid in the cgroup and in cgroups below it. */
function pidsIn(dir: string): number[] {
  const pids: number[] = [];
  const walk = (at: string): void => {
    try {
      for (const line of readFileSync(path.join(at, "cgroup.procs"), "utf8").split("\n"))
        if (line !== "") pids.push(Number(line));
      for (const entry of readdirSync(at, { withFileTypes: true }))
        if (entry.isDirectory()) walk(path.join(at, entry.name));
    } catch {
      // Removed meanwhile.
    }
  };
  walk(dir);
  return pids;
}

/** Removes the directory and the cgroups below it, deepest first; false when one is still busy. */
function removeCgroup(dir: string): boolean {
  try {
    for (const entry of readdirSync(dir, { withFileTypes: true }))
      if (entry.isDirectory()) removeCgroup(path.join(dir, entry.name));
    rmdirSync(dir);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "ENOENT";
  }
}

async function waitWhile(condition: () => boolean, ms: number): Promise<void> {
  for (let waited = 0; condition() && waited < ms; waited += POLL_MS)
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
}

/** SIGKILLs everything in the cgroup, waits until it is empty (at most a few seconds), removes it. Returns what was in it. */
async function killCgroup(dir: string): Promise<SessionProcess[]> {
  const inside = pidsIn(dir)
    .map(describeProcess)
    .filter((p): p is SessionProcess => p !== undefined);
  try {
    writeFileSync(path.join(dir, "cgroup.kill"), "1");
  } catch {
    // Gone already.
  }
  await waitWhile(() => isPopulated(dir), KILL_WAIT_MS);
  removeCgroup(dir);
  return inside;
}

/** The directory sessions get their cgroups in, ready, or why it cannot be had (tried by moving a process into a trial cgroup). */
export function prepareCgroupParent(
  name: string,
): { parent: string; reason?: undefined } | { parent?: undefined; reason: string } {
  if (process.platform !== "linux") return { reason: `cgroups are Linux's (this is ${process.platform})` };
  const own = ownCgroupDirectory();
  if (own.dir === undefined) return { reason: own.reason };
  const parent = path.join(own.dir, name);
  const existed = existsSync(parent);
  try {
    mkdirSync(parent, { recursive: true });
  } catch (error) {
    return {
      reason: `cannot create ${parent} (${(error as NodeJS.ErrnoException).code ?? "error"}): run as root, or in a cgroup delegated to this user`,
    };
  }
  const giveUp = (reason: string): { reason: string } => {
    if (!existed) removeCgroup(parent);
    return { reason };
  };
  if (!existsSync(path.join(parent, "cgroup.kill")))
    return giveUp("the kernel has no cgroup.kill (Linux 5.14 or later)");
  const trial = path.join(parent, `trial-${process.pid}`);
  try {
    mkdirSync(trial, { recursive: true });
  } catch (error) {
    return giveUp(`cannot create a cgroup in ${parent} (${(error as NodeJS.ErrnoException).code ?? "error"})`);
  }
  const [shell = "/bin/sh", ...args] = enterCommand(path.join(trial, "cgroup.procs"), ["/bin/sh", "-c", "exit 0"]);
  const moved = spawnSync(shell, args, { encoding: "utf8", stdio: ["ignore", "ignore", "pipe"] });
  removeCgroup(trial);
  if (moved.status !== 0)
    return giveUp(
      `cannot move a process into a cgroup under ${parent} (${moved.stderr.trim() || `exit ${moved.status ?? moved.signal}`})`,
    );
  return { parent };
}

/** Kills and removes the session cgroups a previous run left under `parent` (it was killed). Returns how many. */
export async function removeCgroupLeftovers(parent: string): Promise<number> {
  let entries: string[];
  try {
    entries = readdirSync(parent, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => path.join(parent, entry.name));
  } catch {
    return 0;
  }
  for (const dir of entries) await killCgroup(dir);
  return entries.length;
}

/** Removes the parent once no session cgroup is left in it. */
export function removeCgroupParent(parent: string): void {
  removeCgroup(parent);
}

/** One session's cgroup. */
export class CgroupContainer {
  readonly dir: string;
  readonly #lingerMs: number;
  /** The harness's pid, which leads its process group; undefined until it started. */
  #leader: number | undefined;
  #ended: Promise<SessionProcess[]> | undefined;
  readonly #forgetExit: () => void;

  /** Creates the cgroup (throws when it cannot: the session should not start uncontained). */
  constructor(options: { parent: string; sessionId: string; lingerMs: number }) {
    this.dir = path.join(options.parent, options.sessionId.replace(/[^A-Za-z0-9._-]/g, "_"));
    this.#lingerMs = options.lingerMs;
    try {
      mkdirSync(this.dir, { recursive: true });
    } catch (error) {
      throw new Error(
        `cannot create the session's cgroup ${this.dir} (${(error as NodeJS.ErrnoException).code ?? "error"})`,
        { cause: error },
      );
    }
    this.#forgetExit = onHostExit(() => writeFileSync(path.join(this.dir, "cgroup.kill"), "1"));
  }

  /** Starts the command through `inner` with the shell in front that moves it into the cgroup. */
  launcher(inner: HarnessLauncher): HarnessLauncher {
    return {
      launch: (spec) => {
        // A command that cannot run is started as is, so the host reports spawn_failed rather than the shell's exit code.
        if (findCommand(spec) === undefined) return inner.launch(spec);
        const launched = inner.launch({
          ...spec,
          command: enterCommand(path.join(this.dir, "cgroup.procs"), spec.command),
        });
        this.#leader = launched.child.pid;
        const { child } = launched;
        return {
          child,
          terminate: () => launched.terminate(),
          // Once the harness is gone, its session ends: what it left would hold its pipes open meanwhile.
          kill: () =>
            child.exitCode !== null || child.signalCode !== null ? this.end().then(() => {}) : launched.kill(),
          hasLiveProcesses: () => isPopulated(this.dir),
        };
      },
    };
  }

  /** Every pid in the session's cgroup now. */
  processIds(): number[] {
    return pidsIn(this.dir);
  }

  /** After the harness exited: the linger (while its process group has members), then cgroup.kill; resolves with what was left. */
  end(): Promise<SessionProcess[]> {
    this.#ended ??= (async () => {
      const leader = this.#leader;
      if (leader !== undefined) await waitWhile(() => processesInGroup(leader).length > 0, this.#lingerMs);
      const left = await killCgroup(this.dir);
      this.#forgetExit();
      return left;
    })();
    return this.#ended;
  }
}
