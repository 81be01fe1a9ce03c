// The orchestrator's job store on SQLite, the time each append takes on the
// event loop: with the WAL copied into orchestrator.db by a thread of its own
// (@oz0/sqlite's SqliteCheckpointer, as the store runs now) against SQLite's
// own checkpoint, run by whichever commit crosses 1,000 pages of log (as the
// store ran before, `wal_autocheckpoint = 1000` on the same handle), the two
// taking turns round by round in one run (issue 24). A checkpoint ends with
// an fsync of the database file: while it runs the orchestrator serves no
// call and hears no session.
//
// Each call appends what a job's session message brings (two events of its
// transcript, the job's row, every other call a lifecycle event for the
// events service), as JobRunner does.
//
//   node --import tsx bench/orchestrator-store-stalls.ts [--calls 4000] [--rounds 4]
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import { rawEvent } from "@oz0/events-client";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { newJobRecord } from "../services/orchestrator/src/store/job-store.js";
import { openSqlite } from "../services/orchestrator/src/store/sql-database.js";
import { SqliteJobStore } from "../services/orchestrator/src/store/sqlite-store.js";
import { benchOptions } from "./bench-options.js";
import { median, percentile, startReport } from "./bench-report.js";

const options = benchOptions({ calls: { type: "number", default: 4000 }, rounds: { type: "number", default: 4 } });

interface Contender {
  name: string;
  store: SqliteJobStore;
  release: () => Promise<void>;
  jobs: number;
}

const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-stalls-"));

function contender(name: string, inlineCheckpoints: boolean): Contender {
  const file = path.join(dir, `${name}.db`);
  const store = new SqliteJobStore({ file });
  // The same handle (openSqlite shares a file's within a process), to set SQLite's default back.
  const shared = openSqlite({ file, synchronous: "NORMAL", migrate: () => undefined });
  if (inlineCheckpoints) shared.handle.pragma("wal_autocheckpoint = 1000");
  return { name, store, release: () => shared.release(), jobs: 0 };
}

const text = (value: string) => create(JobEventSchema, { event: { case: "text", value: { text: value } } });
const words = "the agent reads the failing test, opens the date helper and changes one line; ".repeat(4);

interface RoundResult {
  /** Each append's wall time, ms, sorted. */
  sorted: Float64Array;
  /** The process's CPU per append (every thread), µs. */
  cpuMicros: number;
}

async function round(c: Contender, calls: number): Promise<RoundResult> {
  const times = new Float64Array(calls);
  const cpu = process.cpuUsage();
  let id = "";
  for (let i = 0; i < calls; i++) {
    if (i % 10 === 0) {
      id = `${c.name}_${++c.jobs}`;
      await c.store.createJob(
        newJobRecord(
          {
            id,
            agentName: "fixer",
            agentVersion: 1,
            input: "fix it",
            state: "running",
            sessionId: `ses_${id}`,
            attachments: [],
            servedTools: "",
            startedBy: "",
          },
          new Date(),
        ),
      );
    }
    const started = performance.now();
    await c.store.append({
      jobId: id,
      events: [text(`${i}: ${words}`), text(`${i}: ${words}`)],
      job: { sandboxSeq: i + 1 },
      ...(i % 2 === 0 ? { lifecycle: [rawEvent("tool.called", { jobId: id })] } : {}),
    });
    times[i] = performance.now() - started;
  }
  const used = process.cpuUsage(cpu);
  return { sorted: times.sort(), cpuMicros: (used.user + used.system) / calls };
}

const report = startReport("orchestrator-store-stalls");
const contenders = [contender("thread", false), contender("inline", true)];
try {
  // V8's tiers and the statement caches, both files past their first pages.
  for (const c of contenders) await round(c, 1000);
  const results = new Map<string, RoundResult[]>(contenders.map((c) => [c.name, []]));
  for (let r = 0; r < options.rounds; r++) {
    // Taking turns going first.
    for (const c of r % 2 === 0 ? contenders : [...contenders].reverse()) {
      const result = await round(c, options.calls);
      results.get(c.name)!.push(result);
      const ms = (p: number) => percentile(result.sorted, p).toFixed(3);
      console.log(
        `round ${r + 1}, ${c.name === "thread" ? "checkpoints on a thread (now)" : "checkpoints in a commit (before)"}: append p50 ${ms(0.5)} ms, p99 ${ms(0.99)}, p99.9 ${ms(0.999)}, max ${ms(1)}; CPU ${result.cpuMicros.toFixed(1)} µs an append`,
      );
    }
  }
  const [now, before] = [results.get("thread")!, results.get("inline")!];
  const ratio = (p: number) => now.map((x, i) => percentile(x.sorted, p) / percentile(before[i]!.sorted, p));
  report.ratio("append p50, thread / in a commit", ratio(0.5));
  report.ratio("append p99.9, thread / in a commit", ratio(0.999));
  report.ratio("longest append, thread / in a commit", ratio(1));
  report.ratio(
    "CPU an append (the process, every thread), thread / in a commit",
    now.map((x, i) => x.cpuMicros / before[i]!.cpuMicros),
  );
  console.log(
    `longest append, median over rounds: ${median(now.map((x) => percentile(x.sorted, 1))).toFixed(2)} ms on a thread, ${median(before.map((x) => percentile(x.sorted, 1))).toFixed(2)} ms in a commit`,
  );
} finally {
  for (const c of contenders) {
    await c.release();
    await c.store.close();
  }
  rmSync(dir, { recursive: true, force: true });
  report.end();
}
