// CPU time of other processes, read from /proc/<pid>/stat: what a service
// process spent, all its threads together (worker threads, libuv's pool,
// V8's compiler and GC threads), apart from what its children spent. A
// bench reads it before and after a round and divides the difference by the
// work done. Linux only.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";

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
