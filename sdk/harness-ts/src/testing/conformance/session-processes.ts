// Finding every process of a session, also those that left its process group
// (setsid, a daemonising tool): on Linux, /proc shows each process's
// environment, and every process a harness starts inherits the session's
// OZ0_SESSION_ID unless it clears its environment. The kit kills what it
// finds, so a harness that leaves processes behind never hangs a run.
import { readdirSync, readFileSync } from "node:fs";
import type { HarnessLauncher } from "../../host/index.js";

/** A process that carries a session's marker. */
export interface SessionProcess {
  pid: number;
  /** Its process group; different from the harness's pid when it left the group. */
  pgid: number;
  /** Its command line, for messages (at most 120 characters). */
  command: string;
}

/** True where /proc exposes environments (Linux); elsewhere only the process group is watched. */
export function canSeeProcessEnvironments(): boolean {
  try {
    readFileSync(`/proc/${process.pid}/environ`);
    return true;
  } catch {
    return false;
  }
}

/** Every live process (other than this one) whose environment has `OZ0_SESSION_ID=<sessionId>`. */
export function findSessionProcesses(sessionId: string): SessionProcess[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const marker = Buffer.from(`OZ0_SESSION_ID=${sessionId}\0`);
  const found: SessionProcess[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${pid}/environ`);
      if (!(environ.subarray(0, marker.length).equals(marker) || environ.includes(Buffer.concat([Buffer.from("\0"), marker])))) continue;
      const info = describeProcess(pid);
      if (info !== undefined) found.push(info);
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}

/** Live processes whose process group is `pgid`. */
export function processesInGroup(pgid: number | undefined): SessionProcess[] {
  if (pgid === undefined) return [];
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const found: SessionProcess[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const info = describeProcess(Number(entry));
    if (info !== undefined && info.pgid === pgid) found.push(info);
  }
  return found;
}

function describeProcess(pid: number): SessionProcess | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command: state ppid pgrp …
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z") return undefined;
    const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
    return { pid, pgid: Number(fields[2]), command: command.length > 120 ? `${command.slice(0, 117)}…` : command };
  } catch {
    return undefined;
  }
}

/** SIGKILLs every process of the session; returns what it found. */
export function killSessionProcesses(sessionId: string): SessionProcess[] {
  const found = findSessionProcesses(sessionId);
  for (const p of found) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
  return found;
}

/** What the tracking launcher saw when the harness exited. */
export interface LeftoverProcesses {
  /** Processes of the harness's process group still alive a while ({@link STRAGGLER_MS}) after it exited (killed by the kit). */
  inGroup: boolean;
  /** Those of them the kit could name (through /proc). */
  inGroupProcesses: SessionProcess[];
  /** Processes of the session outside its process group (killed by the kit at once). */
  escaped: SessionProcess[];
  /** Resolves once the verdict is in (the group emptied, or was killed). */
  settled: Promise<void>;
}

/**
 * How long processes of the group may take to end by themselves once the
 * harness exited (a compiler service noticing its pipe closed); past it they
 * are left behind. The host kills the group at once on the real stack.
 */
export const STRAGGLER_MS = 1000;

const activeSessions = new Set<string>();
let exitHookInstalled = false;

/** A fresh record for {@link trackingLauncher}; `settled` resolves at once when nothing was launched. */
export function newLeftovers(): LeftoverProcesses & { settle: () => void } {
  let settle: () => void = () => {};
  const settled = new Promise<void>((resolve) => (settle = resolve));
  return { inGroup: false, inGroupProcesses: [], escaped: [], settled, settle };
}

/**
 * Wraps a launcher so that, when the harness exits, every process of the
 * session is found and killed, in its process group or not: escaped ones at
 * once, the group's once they had {@link STRAGGLER_MS} to end by themselves.
 */
export function trackingLauncher(inner: HarnessLauncher, sessionId: string, leftovers: LeftoverProcesses & { settle: () => void }): HarnessLauncher {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", () => {
      for (const id of activeSessions) killSessionProcesses(id);
    });
  }
  return {
    launch(spec) {
      const launched = inner.launch(spec);
      const { child } = launched;
      const leader = child.pid;
      // Until the scenario's last sweep, a kit that exits takes the session's processes with it.
      activeSessions.add(sessionId);
      const killEscaped = (): void => {
        for (const p of findSessionProcesses(sessionId)) {
          if (p.pgid === leader) continue;
          try {
            process.kill(p.pid, "SIGKILL");
          } catch {
            // already gone
          }
          if (!leftovers.escaped.some((e) => e.pid === p.pid)) leftovers.escaped.push(p);
        }
      };
      let waiting = false;
      // A zombie (ended, waiting for init to reap it) still answers signal 0 to its group; /proc tells them apart.
      const procReadable = canSeeProcessEnvironments();
      const groupAlive = (): boolean => (procReadable ? processesInGroup(leader).length > 0 : launched.hasLiveProcesses?.() === true);
      const waitForGroup = async (): Promise<void> => {
        const until = Date.now() + STRAGGLER_MS;
        while (groupAlive() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
        leftovers.inGroup = groupAlive();
        if (leftovers.inGroup) leftovers.inGroupProcesses = processesInGroup(leader);
        await launched.kill();
        leftovers.settle();
      };
      return {
        child,
        terminate: () => launched.terminate(),
        kill: () => {
          const leaderGone = child.exitCode !== null || child.signalCode !== null;
          if (!leaderGone) return launched.kill();
          killEscaped();
          if (waiting) return;
          waiting = true;
          return waitForGroup();
        },
        hasLiveProcesses: () => {
          killEscaped();
          return leftovers.escaped.length > 0;
        },
      };
    },
  };
}

/** Forgets a finished session after a last sweep. */
export function sweepSession(sessionId: string): SessionProcess[] {
  const found = killSessionProcesses(sessionId);
  activeSessions.delete(sessionId);
  return found;
}
