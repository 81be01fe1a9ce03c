// What an idle orchestrator wakes up for (issue 24): the embedded stack with
// no job, and the orchestrator's threads read from /proc after a settling
// pause and again `--seconds` later: each thread's voluntary context
// switches (it went to sleep of its own accord: a wake-up each) and its run
// time (/proc/<pid>/task/<tid>/schedstat, nanoseconds, exact where
// /proc/<pid>/stat counts 10 ms ticks), per second. control-plane-cost.ts's
// idle background is the whole process's ticks over 3 s, 3.33 ms a second
// a tick; this names the thread.
// OZ0_BENCH_ORCHESTRATOR_DIST=DIR runs DIR/main.js (a copy of an earlier
// services/orchestrator/dist kept inside the repository), as in
// control-plane-cost.ts: runs alternating with and without it compare two
// builds.
//   node --import tsx bench/orchestrator-idle-threads.ts [--seconds 30] [--settle-ms 15000]
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { startEmbeddedStack, serviceMain } from "@oz0/orchestrator";
import { benchOptions } from "./bench-options.js";

const options = benchOptions({
  seconds: { type: "number", default: 30 },
  "settle-ms": { type: "number", default: 15000 },
});

/** The 1, 5 and 15 minute load averages, as the other benches print them. */
function loadAverage(): string {
  return os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(" ");
}

interface ThreadReading {
  name: string;
  wakeups: number;
  runNs: number;
}

function readThreads(pid: number): Map<string, ThreadReading> {
  const threads = new Map<string, ThreadReading>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const dir = `/proc/${pid}/task/${tid}`;
    try {
      const status = readFileSync(`${dir}/status`, "utf8");
      threads.set(tid, {
        name: readFileSync(`${dir}/comm`, "utf8").trim(),
        wakeups: Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0),
        runNs: Number(readFileSync(`${dir}/schedstat`, "utf8").split(" ")[0]),
      });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return threads;
}

const home = mkdtempSync(path.join(os.homedir(), ".cache", "oz0-idle-threads-"));
const node = process.execPath;
const dist = process.env.OZ0_BENCH_ORCHESTRATOR_DIST;
if (dist) {
  // As control-plane-cost.ts: the stack starts each service as `process.execPath main.js`; a script swaps the
  // orchestrator's main.js for DIR's.
  const wrapper = path.join(home, "node.sh");
  const swap = `if [ "$1" = "${serviceMain("orchestrator")}" ]; then shift; set -- "${path.resolve(dist, "main.js")}" "$@"; fi\n`;
  writeFileSync(wrapper, `#!/bin/sh\n${swap}exec "${node}" "$@"\n`, { mode: 0o755 });
  process.execPath = wrapper;
}
const stack = await startEmbeddedStack({ home, env: {} }).finally(() => (process.execPath = node));
try {
  const pid = stack.processes.find((p) => p.name === "orchestrator")!.pid;
  await new Promise((resolve) => setTimeout(resolve, options["settle-ms"]));
  const loadBefore = loadAverage();
  const before = readThreads(pid);
  await new Promise((resolve) => setTimeout(resolve, options.seconds * 1000));
  const after = readThreads(pid);
  console.log(
    `orchestrator-idle-threads: node ${process.version}, ${os.availableParallelism()} cores, load average before ${loadBefore}, after ${loadAverage()}, ${options.seconds} s idle${dist ? `, ${dist}` : ""}`,
  );
  let wakeups = 0;
  let cpuMs = 0;
  for (const [tid, now] of after) {
    const then = before.get(tid) ?? { name: now.name, wakeups: 0, runNs: 0 };
    const w = (now.wakeups - then.wakeups) / options.seconds;
    const ms = (now.runNs - then.runNs) / 1e6 / options.seconds;
    wakeups += w;
    cpuMs += ms;
    if (w > 0 || ms > 0.005)
      console.log(`  ${now.name.padEnd(16)} ${tid.padStart(7)}  ${w.toFixed(2)} wake-ups/s  ${ms.toFixed(3)} ms CPU/s`);
  }
  console.log(`  every thread               ${wakeups.toFixed(2)} wake-ups/s  ${cpuMs.toFixed(3)} ms CPU/s`);
} finally {
  await stack.close();
  rmSync(home, { recursive: true, force: true });
}
