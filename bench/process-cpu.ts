// CPU time of other processes, read from /proc/<pid>/stat: what a service
// process spent, all its threads together (worker threads, libuv's pool,
// V8's compiler and GC threads), apart from what its children spent. A
// bench reads it before and after a round and divides the difference by the
// work done. Linux only.
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks, as /proc/<pid>/stat counts them. */
export interface ProcessTicks {
  /** User and system time of the process itself, all its threads. */
  utime: number;
  stime: number;
  /** User and system time of its children that have ended and been waited for (and of theirs, waited for in turn). */
  cutime: number;
  cstime: number;
}

/**
 * The CPU fields of one /proc/<pid>/stat line. The second field is the
 * command name in parentheses, which may itself hold spaces and ")" (a
 * thread named "a) b"), so the fields are counted from the last ")".
 */
export function parseProcStat(line: string): ProcessTicks {
  const close = line.lastIndexOf(")");
  if (close < 0) throw new Error(`not a /proc/<pid>/stat line (no command name in parentheses): ${line.slice(0, 80)}`);
  // After ") ": state is field 3, so field n is at index n - 3; utime..cstime are fields 14..17.
  const fields = line
    .slice(close + 2)
    .trim()
    .split(/\s+/);
  const field = (n: number): number => {
    const value = Number(fields[n - 3]);
    if (!Number.isInteger(value) || value < 0)
      throw new Error(`/proc/<pid>/stat field ${n} is not a tick count: ${fields[n - 3] ?? "missing"}`);
    return value;
  };
  return { utime: field(14), stime: field(15), cutime: field(16), cstime: field(17) };
}

/** How many ticks make a second (`getconf CLK_TCK`; 100 on every common Linux, so a tick is 10 ms). */
export function ticksPerSecond(): number {
  try {
    const ticks = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim());
    if (Number.isInteger(ticks) && ticks > 0) return ticks;
  } catch {
    // No getconf: Linux's USER_HZ is 100 everywhere it is not configured otherwise.
  }
  return 100;
}

/** CPU milliseconds of one process: its own (all threads) and its waited-for children's. */
export interface ProcessCpu {
  ownMs: number;
  /** The part of ownMs spent in the kernel (system calls, page faults, the file system's work done in the caller). */
  ownSystemMs: number;
  childrenMs: number;
}

export function readProcessCpu(pid: number, ticks: number): ProcessCpu {
  const t = parseProcStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  return {
    ownMs: ((t.utime + t.stime) * 1000) / ticks,
    ownSystemMs: (t.stime * 1000) / ticks,
    childrenMs: ((t.cutime + t.cstime) * 1000) / ticks,
  };
}

/**
 * How often a process's threads went to sleep of their own accord
 * (`voluntary_ctxt_switches` in /proc/<pid>/task/<tid>/status): each is a
 * wake-up later. `main` is the main thread's (a Node service's event loop
 * blocking in epoll_wait, mostly), `all` every thread's. On this project's
 * VMs a wake-up after an idle gap costs a Node process 50–270 µs of CPU
 * however little it then does (bench/README.md, "What a wake-up costs"), so
 * wake-ups per job are a cost of their own. Threads that ended took their
 * counts with them.
 */
export function readProcessWakeups(pid: number): { main: number; all: number } {
  let all = 0;
  let main = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    let status: string;
    try {
      status = readFileSync(`/proc/${pid}/task/${tid}/status`, "utf8");
    } catch {
      continue; // the thread ended between the listing and the read
    }
    const match = /^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status);
    if (!match) throw new Error(`/proc/${pid}/task/${tid}/status has no voluntary_ctxt_switches line`);
    const count = Number(match[1]);
    all += count;
    if (tid === String(pid)) main = count;
  }
  return { main, all };
}
