// Where a machine's CPU goes while a bench runs, from Linux `perf`: a
// system-wide `perf record` of on-CPU samples (the cpu-clock event, every
// process and thread, kernel and user, with call chains), read back with
// `perf script`. Unlike V8's profiler, which samples one thread by wall
// clock (a thread waiting in a system call, or for a core, is counted as if
// busy), a sample here is a core running that code, so a process's share is
// its CPU; and it sees what no service's own profile shows: the kernel's
// work in its system calls, and the short-lived processes of each session
// (the harness, its keeper and entry, bubblewrap), which end before anyone
// reads their /proc.
//
// JavaScript frames have names when the Node processes run with
// `--perf-basic-prof` (V8 writes /tmp/perf-<pid>.map, which `perf script`
// reads). V8 moves and frees code, and the map only grows, so a name can be
// stale: a frame can be named after code that lived at its address before.
// Treat JavaScript names as pointers, not proof; native and kernel frames are
// exact.
import { spawn, spawnSync } from "node:child_process";
import { once } from "node:events";

/** One sample: the process and thread it ran in and its call chain, innermost frame first. */
export interface PerfSample {
  command: string;
  pid: number;
  tid: number;
  frames: PerfFrame[];
}

export interface PerfFrame {
  symbol: string;
  /** The file the code came from: a binary, a shared library, `[kernel.kallsyms]`, or `/tmp/perf-<pid>.map` for JIT code. */
  dso: string;
}

/** Says why `perf` cannot record here, or undefined when it can. */
export function perfUnavailable(): string | undefined {
  const probe = spawnSync("perf", ["--version"], { encoding: "utf8" });
  if (probe.error !== undefined)
    return `perf is not installed (${(probe.error as NodeJS.ErrnoException).code ?? probe.error.message}); on Debian: apt-get install linux-perf`;
  if (probe.status !== 0) return `perf --version failed: ${probe.stderr.trim()}`;
  return undefined;
}

export interface PerfRecording {
  /** Stops recording and returns the samples taken. */
  stop(): Promise<PerfSample[]>;
}

/**
 * Starts recording every core's on-CPU samples at `frequency` Hz into
 * `file`, with call chains, until {@link PerfRecording.stop}. Needs root or
 * a perf_event_paranoid that allows system-wide recording.
 */
export async function startPerfRecord(options: { file: string; frequency: number }): Promise<PerfRecording> {
  const child = spawn(
    "perf",
    ["record", "-e", "cpu-clock", "-F", String(options.frequency), "-a", "-g", "-o", options.file],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (text: string) => (stderr += text));
  // perf says nothing when it starts; give it a moment to open its events, and fail early if it could not.
  const exited = once(child, "exit");
  const started = await Promise.race([exited.then(() => false), delay(500).then(() => true)]);
  if (!started) throw new Error(`perf record ended at once: ${stderr.trim()}`);
  return {
    async stop(): Promise<PerfSample[]> {
      // SIGINT is how perf record is told to stop: it finishes the file and exits.
      child.kill("SIGINT");
      await exited;
      return readPerfSamples(options.file);
    },
  };
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads a `perf record` file through `perf script`. */
export function readPerfSamples(file: string): PerfSample[] {
  const script = spawnSync("perf", ["script", "-i", file, "-F", "comm,pid,tid,ip,sym,dso"], {
    encoding: "utf8",
    maxBuffer: 1 << 30,
  });
  if (script.status !== 0) throw new Error(`perf script failed (${script.status}): ${script.stderr.trim()}`);
  return parsePerfScript(script.stdout);
}

/**
 * Parses `perf script -F comm,pid,tid,ip,sym,dso`: a header line a sample
 * (`<command> <pid>/<tid>`; a command may hold spaces), then one indented
 * line a frame (`<address> <symbol> (<dso>)`), then a blank line.
 */
export function parsePerfScript(text: string): PerfSample[] {
  const samples: PerfSample[] = [];
  let current: PerfSample | undefined;
  for (const line of text.split("\n")) {
    if (line.trim() === "") {
      current = undefined;
      continue;
    }
    if (current === undefined) {
      const header = /^\s*(.*?)\s+(\d+)\/(\d+)\s*$/.exec(line);
      if (header === null) continue;
      current = { command: header[1]!, pid: Number(header[2]), tid: Number(header[3]), frames: [] };
      samples.push(current);
      continue;
    }
    const frame = /^\s*[0-9a-f]+\s+(.*?)\s+\(([^()]*)\)\s*$/.exec(line);
    if (frame !== null) current.frames.push({ symbol: frame[1]!, dso: frame[2]! });
  }
  return samples;
}

const KERNEL = "[kernel.kallsyms]";

export interface ProcessShare {
  samples: number;
  /** Samples whose innermost frame was in the kernel: system calls, page faults, interrupts. */
  kernelSamples: number;
  /** Innermost frames by samples, most first. */
  selfSymbols: [string, number][];
  /** The system call each sample was in, where it was in one (`__x64_sys_*`), by samples. */
  systemCalls: [string, number][];
}

/** The samples of `pids` (every thread of each) together: their kernel share, top symbols and system calls. */
export function processShare(samples: readonly PerfSample[], pids: ReadonlySet<number>, top = 12): ProcessShare {
  const own = samples.filter((s) => pids.has(s.pid));
  const symbols = new Map<string, number>();
  const calls = new Map<string, number>();
  let kernelSamples = 0;
  for (const sample of own) {
    const inner = sample.frames[0];
    if (inner === undefined) continue;
    if (inner.dso === KERNEL) kernelSamples++;
    count(symbols, shortSymbol(inner));
    const call = sample.frames.find((f) => /^__(x64|arm64)_sys_|^__do_sys_/.test(f.symbol));
    if (call !== undefined) count(calls, call.symbol.replace(/^__(x64|arm64)_sys_|^__do_sys_/, ""));
  }
  return { samples: own.length, kernelSamples, selfSymbols: topOf(symbols, top), systemCalls: topOf(calls, top) };
}

/** Samples of processes not in `known`, by command name, most first; the idle task (pid 0) is left out. */
export function othersByCommand(samples: readonly PerfSample[], known: ReadonlySet<number>): [string, number][] {
  const byCommand = new Map<string, number>();
  for (const sample of samples) if (sample.pid !== 0 && !known.has(sample.pid)) count(byCommand, sample.command);
  return topOf(byCommand, Number.POSITIVE_INFINITY);
}

/**
 * The samples of `pids` as folded stacks (`outer;...;inner count` a line),
 * which flamegraph.pl, speedscope and Firefox's profiler open.
 */
export function foldedStacks(samples: readonly PerfSample[], pids: ReadonlySet<number>): string {
  const stacks = new Map<string, number>();
  for (const sample of samples) {
    if (!pids.has(sample.pid) || sample.frames.length === 0) continue;
    const names = sample.frames.map((f) => shortSymbol(f).replaceAll(";", ":")).reverse();
    count(stacks, `${sample.command};${names.join(";")}`);
  }
  return [...stacks].map(([stack, n]) => `${stack} ${n}`).join("\n") + "\n";
}

/** A frame's name, short: JavaScript frames without their `file://` prefix, an unknown one by its file. */
function shortSymbol(frame: PerfFrame): string {
  if (frame.symbol === "[unknown]") return `[unknown in ${frame.dso.replace(/^.*\//, "")}]`;
  const kernel = frame.dso === KERNEL ? " [k]" : "";
  return frame.symbol.replace(/file:\/\/\/\S*?\/((?:node_modules|services|lib|sdk)\/)/, "$1") + kernel;
}

function count(counts: Map<string, number>, key: string): void {
  counts.set(key, (counts.get(key) ?? 0) + 1);
}

function topOf(counts: Map<string, number>, top: number): [string, number][] {
  return [...counts].sort((a, b) => b[1] - a[1]).slice(0, top);
}
