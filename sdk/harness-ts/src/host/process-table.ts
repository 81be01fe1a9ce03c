// Processes as Linux's /proc shows them: what a containment mechanism lists
// when it reports what a session left behind, and how the environment-marker
// fallback finds a session's processes at all.
import { readdirSync, readFileSync } from "node:fs";

/** A process found in /proc. */
export interface SessionProcess {
  pid: number;
  /** Its process group; different from the harness's when it left the group (setsid). */
  pgid: number;
  /** Its command line, for messages (at most 120 characters). */
  command: string;
}

/** True where /proc exposes processes' environments (Linux); elsewhere the environment marker finds nothing. */
export function canSeeProcessEnvironments(): boolean {
  try {
    readFileSync(`/proc/${process.pid}/environ`);
    return true;
  } catch {
    return false;
  }
}

function pids(): number[] {
  try {
    return readdirSync("/proc")
      .filter((entry) => /^\d+$/.test(entry))
      .map(Number);
  } catch {
    return [];
  }
}

/** The live process `pid` (not a zombie), or undefined when it is gone or not readable. */
export function describeProcess(pid: number): SessionProcess | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the parenthesised command (which may itself hold ") "): state ppid pgrp …
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z" || fields[0] === "X") return undefined;
    const command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
    return { pid, pgid: Number(fields[2]), command: command.length > 120 ? `${command.slice(0, 117)}…` : command };
  } catch {
    return undefined;
  }
}

/** Live processes whose process group is `pgid`. */
export function processesInGroup(pgid: number | undefined): SessionProcess[] {
  if (pgid === undefined) return [];
  return pids()
    .map(describeProcess)
    .filter((p): p is SessionProcess => p !== undefined && p.pgid === pgid);
}

/**
 * Every live process (other than this one) whose environment holds
 * `name=value`: every process a harness starts inherits the session's
 * environment unless it clears or replaces it.
 */
export function processesWithEnvironment(name: string, value: string): SessionProcess[] {
  const marker = Buffer.from(`${name}=${value}\0`);
  const inside = Buffer.concat([Buffer.from("\0"), marker]);
  const found: SessionProcess[] = [];
  for (const pid of pids()) {
    if (pid === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${pid}/environ`);
      if (!(environ.subarray(0, marker.length).equals(marker) || environ.includes(inside))) continue;
      const info = describeProcess(pid);
      if (info !== undefined) found.push(info);
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  return found;
}

/** SIGKILLs each process; one already gone is not an error. */
export function killProcesses(processes: readonly SessionProcess[]): void {
  for (const p of processes) {
    try {
      process.kill(p.pid, "SIGKILL");
    } catch {
      // already gone
    }
  }
}

const exitActions = new Set<() => void>();
let exitHookInstalled = false;

/**
 * Runs `action` synchronously if this process exits before the returned
 * function is called (a session's processes must not outlive their host).
 */
export function onHostExit(action: () => void): () => void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on("exit", () => {
      for (const run of exitActions) {
        try {
          run();
        } catch {
          // Gone already; the others still run.
        }
      }
    });
  }
  exitActions.add(action);
  return () => exitActions.delete(action);
}
