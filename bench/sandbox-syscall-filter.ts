// What the sessions' seccomp filter costs (services/sandbox README, "System
// calls"). Two measures, each with the filter and without it, taking turns
// going first:
//
// - sessions: a root sandbox's bubblewrap sessions one at a time, as in
//   sandbox-session-uids.ts, through a sandbox that loads the filter and one
//   started with OZ0_SESSION_SYSCALL_FILTER=off: the median session time,
//   and the CPU a session of this process (the sandbox's own work, which the
//   filter should leave as it is: the filter is the sessions');
// - system calls: perl making `--calls` calls under bwrap, with and without
//   `--seccomp`, reporting the CPU a call (perl's own `times`): getppid, the
//   cheapest call there is, where the filter's share is largest, and stat of
//   a file, a call a build makes by the thousand.
//
//   node --import tsx bench/sandbox-syscall-filter.ts [--sessions 40] [--rounds 4] [--warmup 5] [--calls 2000000]
import { spawnSync } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { startScriptedModel } from "@oz0/harness/testing";
import { sessionSyscallFilter } from "@oz0/sandbox";
import { benchOptions } from "./bench-options.js";
import { startReport } from "./bench-report.js";
import { sessionRound, type SessionRoundResult } from "./sandbox-session-rounds.js";

const {
  sessions: SESSIONS,
  rounds: ROUNDS,
  warmup: WARMUP,
  calls: CALLS,
} = benchOptions({
  sessions: { type: "number", default: 40 },
  rounds: { type: "number", default: 4 },
  warmup: { type: "number", default: 5 },
  calls: { type: "number", default: 2_000_000 },
});

const report = startReport("sandbox-syscall-filter");
const { program, reason } = sessionSyscallFilter();
if (process.getuid?.() !== 0 || program === undefined) {
  console.log(program === undefined ? `no filter here: ${reason}` : "needs root, as sandbox-session-uids.ts");
  report.end();
  process.exit(1);
}
/** getppid's and stat's numbers, for perl's syscall(). */
const NUMBERS: Partial<Record<NodeJS.Architecture, { getppid: number; stat: string }>> = {
  x64: { getppid: 110, stat: "stat" },
  arm64: { getppid: 173, stat: "stat" },
};
const numbers = NUMBERS[process.arch];
if (numbers === undefined) throw new Error(`no system call numbers for ${process.arch}`);

type Variant = "filter" | "none";

/** µs of CPU a call of perl's loop under bwrap, with the filter loaded from fd 3 or not. */
function callCost(variant: Variant, call: "getppid" | "stat"): number {
  const loop =
    call === "getppid"
      ? `syscall(${numbers!.getppid}) for 1 .. ${CALLS};`
      : `my @s; @s = stat("/usr/bin/perl") for 1 .. ${CALLS / 4};`;
  const fd = variant === "filter" ? openSync(program!, "r") : -1;
  try {
    const run = spawnSync(
      "bwrap",
      [
        "--unshare-all",
        "--die-with-parent",
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        ...(variant === "filter" ? ["--seccomp", "3"] : []),
        "--",
        "perl",
        "-e",
        `${loop} my ($u, $s) = times; print $u + $s;`,
      ],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe", ...(fd >= 0 ? [fd] : [])] },
    );
    if (run.status !== 0) throw new Error(`bwrap failed: ${run.stderr}`);
    return (Number(run.stdout) * 1e6) / (call === "getppid" ? CALLS : CALLS / 4);
  } finally {
    if (fd >= 0) closeSync(fd);
  }
}

const model = await startScriptedModel({
  turns: () => ({ text: "hello", usage: { input: 10, output: 2 } }),
  isSideCall: () => false,
});
const sessions: Record<Variant, SessionRoundResult[]> = { filter: [], none: [] };
const calls: Record<Variant, { getppid: number[]; stat: number[] }> = {
  filter: { getppid: [], stat: [] },
  none: { getppid: [], stat: [] },
};
try {
  for (let r = 0; r < ROUNDS; r++) {
    for (const variant of (r % 2 === 0 ? ["filter", "none"] : ["none", "filter"]) as Variant[]) {
      const result = await sessionRound({
        sandbox: variant === "none" ? { syscallFilter: "off" as const } : {},
        modelUrl: model.url,
        sessions: SESSIONS,
        warmup: WARMUP,
      });
      sessions[variant].push(result);
      const getppid = callCost(variant, "getppid");
      const stat = callCost(variant, "stat");
      calls[variant].getppid.push(getppid);
      calls[variant].stat.push(stat);
      console.log(
        `round ${r + 1} ${variant}: ${result.cpuMs.toFixed(2)} ms of CPU a session, median session ${result.p50Ms.toFixed(1)} ms; ` +
          `getppid ${(getppid * 1000).toFixed(0)} ns, stat ${(stat * 1000).toFixed(0)} ns of CPU a call`,
      );
    }
  }
  const ratio = (of: (v: Variant, i: number) => number): number[] =>
    sessions.filter.map((_, i) => of("filter", i) / of("none", i));
  report.ratio(
    "CPU a session, filter / none",
    ratio((v, i) => sessions[v][i]!.cpuMs),
  );
  report.ratio(
    "median session time, filter / none",
    ratio((v, i) => sessions[v][i]!.p50Ms),
  );
  report.ratio(
    "CPU a getppid call, filter / none",
    ratio((v, i) => calls[v].getppid[i]!),
  );
  report.ratio(
    "CPU a stat call, filter / none",
    ratio((v, i) => calls[v].stat[i]!),
  );
} finally {
  await model.close();
  report.end();
}
