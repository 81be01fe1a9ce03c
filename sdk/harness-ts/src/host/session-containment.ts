// Containment: every process a session starts ends with the session, also
// one that left the harness's process group (setsid, a daemon, a double
// fork), which the process group alone cannot reach. Three mechanisms, the
// strongest that works here chosen once:
//
// - `cgroup`: a cgroup v2 per session (cgroup-containment.ts). Sound: nothing
//   leaves a cgroup without write access to the cgroup tree.
// - `subreaper`: a wrapper that is a child subreaper (subreaper-containment.ts).
//   Sound: every orphan below it is handed to it, not to init.
// - `environment`: best effort. The session's processes are found by the
//   OZ0_SESSION_ID=<id> every process of the session inherits, read from
//   /proc/<pid>/environ, plus its process group. A process that clears or
//   replaces its environment (env -i, a daemon that re-execs itself clean),
//   or one of another user whose environ is unreadable, is not found; without
//   /proc (macOS) only the process group is.
import type { HarnessLauncher, LaunchedHarness } from "./process-launcher.js";
import {
  CgroupContainer,
  prepareCgroupParent,
  removeCgroupLeftovers,
  removeCgroupParent,
} from "./cgroup-containment.js";
import {
  canSeeProcessEnvironments,
  killProcesses,
  onHostExit,
  processesInGroup,
  processesWithEnvironment,
} from "./process-table.js";
import type { SessionProcess } from "./process-table.js";
import { detectSubreaper, SubreaperContainer } from "./subreaper-containment.js";

/** How a session's processes are found and ended, strongest first. */
export type ContainmentMechanism = "cgroup" | "subreaper" | "environment";
/** `auto` takes the strongest mechanism that works here; a named one is required. */
export type ContainmentSetting = "auto" | ContainmentMechanism;

export const CONTAINMENT_MECHANISMS: readonly ContainmentMechanism[] = ["cgroup", "subreaper", "environment"];

/** Options of {@link Containment.container}. */
export interface ContainerOptions {
  /** The session's id: its cgroup's name, and the OZ0_SESSION_ID the `environment` mechanism looks for. */
  sessionId: string;
  /**
   * Once the harness exited, how long what stayed in its process group may
   * take to end by itself before everything left is killed and reported (a
   * tolerance, for a test kit; what left the group is not waited for).
   * Default 0: killed at once.
   */
  lingerMs?: number;
  /** A file in a directory of the host's own where the `subreaper` wrapper lists what it killed; without it that mechanism reports nothing. */
  reportFile?: string;
}

/** One session's container. */
export interface SessionContainer {
  /**
   * Wraps the launcher that starts the harness (the default process-group
   * one, or one that puts `setpriv` in front and execs the command, keeping
   * its pid): the harness starts inside, and `hasLiveProcesses()` asks the
   * container. The `subreaper` mechanism spawns its wrapper itself (inner
   * only starts a command that cannot run, so that it fails as a spawn
   * failure); the wrapper takes the parent-death role, killing everything
   * below it when its parent dies.
   */
  launcher(inner: HarnessLauncher): HarnessLauncher;
  /**
   * Call once the harness has exited (or never started; called while it
   * runs, it ends the harness too): after the linger, kills every process of
   * the session still alive and waits until they are gone. Resolves with
   * those it found. Idempotent; never rejects.
   */
  end(): Promise<SessionProcess[]>;
  /**
   * The pids of the session's processes now, where the mechanism finds them beyond the harness's own tree (`cgroup`:
   * its cgroup; `environment`: the marker, best effort); absent for `subreaper`, whose orphans stay below the wrapper.
   */
  processIds?(): number[];
}

/** The mechanism this host uses, for every session. */
export interface Containment {
  readonly mechanism: ContainmentMechanism;
  /** Why no stronger mechanism runs (what was missing), or that it was chosen; empty for `cgroup` under `auto`. */
  readonly reason: string;
  /** Where it works: the directory the session cgroups go in, or the perl that runs the wrapper; empty for `environment`. */
  readonly location: string;
  /** A container for one session; throws when the session cannot be contained (its cgroup cannot be made). */
  container(options: ContainerOptions): SessionContainer;
  /** Kills and removes what sessions of a killed earlier run under the same name left (`cgroup` only). Returns how many sessions' worth. */
  removeLeftovers(): Promise<number>;
  /** Removes the directory the session cgroups went in; call once no session runs. */
  close(): void;
}

/** A named mechanism does not work here. */
export class ContainmentUnavailableError extends Error {
  override name = "ContainmentUnavailableError";
}

/**
 * Chooses how sessions are contained, once per host process; tries each
 * mechanism for real (a process moved into a trial cgroup, a trial wrapper).
 * `name` names the directory of this host's session cgroups below its own
 * cgroup (one per sandbox root, say): what a killed run left there is the
 * next run's to remove.
 */
export function chooseContainment(options: { setting?: ContainmentSetting; name: string }): Containment {
  const setting = options.setting ?? "auto";
  const missing: string[] = [];
  const unavailable = (mechanism: ContainmentMechanism, reason: string): ContainmentUnavailableError =>
    new ContainmentUnavailableError(`containment by ${mechanism} was asked for but does not work here: ${reason}`);
  if (setting === "auto" || setting === "cgroup") {
    const prepared = prepareCgroupParent(options.name);
    if (prepared.parent !== undefined) return cgroupContainment(prepared.parent, setting === "cgroup" ? "chosen" : "");
    if (setting === "cgroup") throw unavailable("cgroup", prepared.reason);
    missing.push(`no cgroup of its own: ${prepared.reason}`);
  }
  if (setting === "auto" || setting === "subreaper") {
    const detected = detectSubreaper();
    if (detected.subreaper !== undefined) {
      const { subreaper } = detected;
      return {
        mechanism: "subreaper",
        reason: setting === "subreaper" ? "chosen" : missing.join("; "),
        location: subreaper.perlPath,
        container: (container) =>
          new SubreaperContainer({ subreaper, lingerMs: container.lingerMs ?? 0, reportFile: container.reportFile }),
        removeLeftovers: () => Promise.resolve(0),
        close: () => {},
      };
    }
    if (setting === "subreaper") throw unavailable("subreaper", detected.reason);
    missing.push(`no child subreaper: ${detected.reason}`);
  }
  if (!canSeeProcessEnvironments())
    missing.push("and /proc shows no environments here, so only the process group is found");
  return {
    mechanism: "environment",
    reason: setting === "environment" ? "chosen" : missing.join("; "),
    location: "",
    container: (container) => new EnvironmentContainer(container.sessionId, container.lingerMs ?? 0),
    removeLeftovers: () => Promise.resolve(0),
    close: () => {},
  };
}

/** Why `mechanism` does not work here (tried for real, then put away), or undefined when it does. */
export function containmentUnavailable(mechanism: ContainmentMechanism): string | undefined {
  try {
    chooseContainment({ setting: mechanism, name: `oz0-containment-probe-${process.pid}` }).close();
    return undefined;
  } catch (error) {
    if (error instanceof ContainmentUnavailableError) return error.message;
    throw error;
  }
}

function cgroupContainment(parent: string, reason: string): Containment {
  return {
    mechanism: "cgroup",
    reason,
    location: parent,
    container: (container) =>
      new CgroupContainer({ parent, sessionId: container.sessionId, lingerMs: container.lingerMs ?? 0 }),
    removeLeftovers: () => removeCgroupLeftovers(parent),
    close: () => removeCgroupParent(parent),
  };
}

const POLL_MS = 20;
/** How long the best-effort search keeps killing what it finds. */
const KILL_WAIT_MS = 5000;

/** The best-effort mechanism: the marker in the environment, and the process group. */
class EnvironmentContainer implements SessionContainer {
  readonly #sessionId: string;
  readonly #lingerMs: number;
  #leader: number | undefined;
  #launched: LaunchedHarness | undefined;
  #ended: Promise<SessionProcess[]> | undefined;
  #forgetExit: () => void = () => {};

  constructor(sessionId: string, lingerMs: number) {
    this.#sessionId = sessionId;
    this.#lingerMs = lingerMs;
  }

  processIds(): number[] {
    return this.members().map((p) => p.pid);
  }

  members(): SessionProcess[] {
    const found = processesWithEnvironment("OZ0_SESSION_ID", this.#sessionId);
    for (const p of processesInGroup(this.#leader)) if (!found.some((f) => f.pid === p.pid)) found.push(p);
    return found;
  }

  launcher(inner: HarnessLauncher): HarnessLauncher {
    return {
      launch: (spec) => {
        const launched = inner.launch(spec);
        this.#launched = launched;
        this.#leader = launched.child.pid;
        this.#forgetExit = onHostExit(() => killProcesses(this.members()));
        const { child } = launched;
        return {
          child,
          terminate: () => launched.terminate(),
          // Once the harness is gone, its session ends: what it left would hold its pipes open meanwhile.
          kill: () =>
            child.exitCode !== null || child.signalCode !== null ? this.end().then(() => {}) : launched.kill(),
          hasLiveProcesses: () => this.members().length > 0 || launched.hasLiveProcesses?.() === true,
        };
      },
    };
  }

  end(): Promise<SessionProcess[]> {
    this.#ended ??= (async () => {
      if (this.#launched === undefined) return [];
      for (let waited = 0; processesInGroup(this.#leader).length > 0 && waited < this.#lingerMs; waited += POLL_MS)
        await sleep(POLL_MS);
      const left = this.members();
      // What is found is killed, and the search repeats: a process may have forked meanwhile.
      for (
        let waited = 0, now = left;
        now.length > 0 && waited < KILL_WAIT_MS;
        waited += POLL_MS, now = this.members()
      ) {
        killProcesses(now);
        await this.#launched.kill();
        await sleep(POLL_MS);
      }
      this.#forgetExit();
      return left;
    })();
    return this.#ended;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
