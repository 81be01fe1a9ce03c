// Every process of a kit session, also those that left its process group
// (setsid, a daemonising tool): each session runs in a container of the host
// side's containment (a cgroup of its own, else under a child subreaper, else
// found by its OZ0_SESSION_ID in /proc: best effort). When the harness exits,
// what stayed in its process group gets a moment to end by itself; what is
// still there then, in the group or out of it, is listed for the `processes`
// case and killed, so a harness that leaves processes behind never hangs a
// run, nor outlives it.
import path from "node:path";
import { chooseContainment, processGroupLauncher } from "../../host/index.js";
import type {
  Containment,
  ContainmentSetting,
  HarnessLauncher,
  SessionContainer,
  SessionProcess,
} from "../../host/index.js";
import { CONTAINMENT_MECHANISMS } from "../../host/session-containment.js";
import { killProcesses, processesWithEnvironment } from "../../host/process-table.js";

/** What the tracking launcher saw when the harness exited. */
export interface LeftoverProcesses {
  /** Processes of the harness's process group still alive a while ({@link STRAGGLER_MS}) after it exited (killed by the kit). */
  inGroup: boolean;
  /** Those processes. */
  inGroupProcesses: SessionProcess[];
  /** Processes of the session outside its process group still alive then (not waited for; killed by the kit). */
  escaped: SessionProcess[];
  /** Resolves once the verdict is in (everything left was killed). */
  settled: Promise<void>;
}

/**
 * How long processes the harness started may take to end by themselves once
 * it exited (a compiler service noticing its pipe closed); past it they are
 * left behind. The sandbox kills them at once on the real stack.
 */
export const STRAGGLER_MS = 1000;

let containment: Containment | undefined;

/**
 * The kit's containment, chosen at first use: the strongest that works here,
 * or the one OZ0_CONTAINMENT names (`cgroup`, `subreaper`, `environment`).
 */
export function kitContainment(): Containment {
  if (containment === undefined) {
    const setting = process.env.OZ0_CONTAINMENT ?? "auto";
    if (setting !== "auto" && !(CONTAINMENT_MECHANISMS as readonly string[]).includes(setting)) {
      throw new Error(`OZ0_CONTAINMENT=${setting} is not one of auto, ${CONTAINMENT_MECHANISMS.join(", ")}`);
    }
    const chosen = chooseContainment({
      setting: setting as ContainmentSetting,
      name: `oz0-conformance-${process.pid}`,
    });
    process.once("exit", () => chosen.close());
    containment = chosen;
  }
  return containment;
}

/** A fresh record for {@link trackingLauncher}; `settled` resolves at once when nothing was launched. */
export function newLeftovers(): LeftoverProcesses & { settle: () => void } {
  let settle: () => void = () => {};
  const settled = new Promise<void>((resolve) => (settle = resolve));
  return { inGroup: false, inGroupProcesses: [], escaped: [], settled, settle };
}

/** Containers of sessions not swept yet. */
const containers = new Map<string, SessionContainer>();

/**
 * Starts the harness in a container of its own; when it has exited (the host
 * kills after every exit), what it left is sorted into its process group's
 * and the escaped ones, all of it killed, and the record settled.
 */
export function trackingLauncher(
  sessionId: string,
  leftovers: LeftoverProcesses & { settle: () => void },
): HarnessLauncher {
  return {
    launch(spec) {
      // The wrapper's report goes beside the working directory, into the case's own temporary directory.
      const container = kitContainment().container({
        sessionId,
        lingerMs: STRAGGLER_MS,
        reportFile: path.join(path.dirname(spec.cwd), "leftover-processes.tsv"),
      });
      containers.set(sessionId, container);
      const launched = container.launcher(processGroupLauncher()).launch(spec);
      const { child } = launched;
      const leader = child.pid;
      let ending: Promise<void> | undefined;
      const end = (): Promise<void> =>
        (ending ??= container.end().then((left) => {
          for (const p of left) (p.pgid === leader ? leftovers.inGroupProcesses : leftovers.escaped).push(p);
          leftovers.inGroup = leftovers.inGroupProcesses.length > 0;
          leftovers.settle();
        }));
      return {
        child,
        terminate: () => launched.terminate(),
        kill: () => {
          const leaderGone = child.exitCode !== null || child.signalCode !== null;
          return leaderGone ? end() : launched.kill();
        },
        hasLiveProcesses: () => launched.hasLiveProcesses?.() === true,
      };
    },
  };
}

/**
 * Forgets a finished session: ends its container (when the harness never ran,
 * that only removes it) and kills whatever still carries the session's
 * marker, returning those.
 */
export function sweepSession(sessionId: string): SessionProcess[] {
  const container = containers.get(sessionId);
  containers.delete(sessionId);
  // Never rejects; only a session that never exited gets here with it pending.
  void container?.end();
  const found = processesWithEnvironment("OZ0_SESSION_ID", sessionId);
  killProcesses(found);
  return found;
}

/** Said once per run when the kit can only find a session's processes on a best-effort basis. */
export function containmentWarning(): string | undefined {
  const chosen = kitContainment();
  if (chosen.mechanism !== "environment") return undefined;
  return `oz0-harness-conformance: processes that left the process group are found only by the session's OZ0_SESSION_ID in /proc (best effort: one that clears its environment is missed), because ${chosen.reason}`;
}
