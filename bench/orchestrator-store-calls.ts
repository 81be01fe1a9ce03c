// The orchestrator's job store on SQLite, a job's store calls in one process:
// the hot queries compiled once per engine and shape
// (services/orchestrator/src/store/compiled-once.ts) against the same
// queries built and compiled by Kysely on every call, as the store ran them
// before, alternating in the same run (issue 24).
//
// A simulated job makes the calls control-plane-cost.ts counted per job of
// the Python fake harness in the orchestrator (its SQL statements, counted by
// text): 11 appends (events, the job's row, lifecycle events in 5 of them,
// one permission), 7 reads of the job's row, 4 updates of it, 2 reads of its
// events, 3 claims of the lifecycle outbox and the deletes of what was
// shipped, one permission marked delivered. "Built each call" swaps
// CompiledOnce's compile for its `built` (Kysely's builder and compiler, as
// before); everything else (the store's code, better-sqlite3's cached
// statements, the file's transactions) is the same.
//
//   node --import tsx bench/orchestrator-store-calls.ts [--jobs 200] [--rounds 5]
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { create } from "@bufbuild/protobuf";
import { rawEvent } from "@oz0/events-client";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { CompiledOnce } from "../services/orchestrator/src/store/compiled-once.js";
import { newJobRecord, type PermissionRecord } from "../services/orchestrator/src/store/job-store.js";
import { SqliteJobStore } from "../services/orchestrator/src/store/sqlite-store.js";
import { benchOptions } from "./bench-options.js";
import { median, startReport } from "./bench-report.js";

const options = benchOptions({ jobs: { type: "number", default: 200 }, rounds: { type: "number", default: 5 } });

const compiledOnce = CompiledOnce.prototype.compile;
const builtEachCall: typeof compiledOnce = function (this: CompiledOnce<unknown, unknown>, db, engine, values) {
  return this.built(db, engine, values);
};

const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-calls-"));
const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
let jobNumber = 0;

const text = (value: string) => create(JobEventSchema, { event: { case: "text", value: { text: value } } });

async function oneJob(): Promise<void> {
  const id = `job_${++jobNumber}`;
  await store.createJob(
    newJobRecord(
      {
        id,
        agentName: "fixer",
        agentVersion: 1,
        input: "fix it",
        state: "pending",
        sessionId: `ses_${id}`,
        attachments: [],
        servedTools: "",
        startedBy: "",
      },
      new Date(),
    ),
  );
  const permission: PermissionRecord = {
    jobId: id,
    id: "perm_1",
    callId: "call_1",
    sessionId: `ses_${id}`,
    tool: "run_command",
    input: { command: "ls" },
    title: "run ls",
    needsPerson: false,
    status: "approved",
    reason: "",
    decider: "policy",
    answeredBy: "policy",
    requestedAt: new Date(),
    answeredAt: new Date(),
    delivered: false,
  };
  for (let i = 0; i < 11; i++) {
    await store.getJob(id);
    await store.append({
      jobId: id,
      events: i % 4 === 0 ? [text("a"), text("b")] : [text(`step ${i}`)],
      job: { sandboxSeq: i + 1, ...(i === 0 ? { state: "running" as const, startedAt: new Date() } : {}) },
      ...(i % 2 === 0 ? { lifecycle: [rawEvent("tool.called", { jobId: id })] } : {}),
      ...(i === 5 ? { permissions: [permission] } : {}),
    });
    if (i < 4) await store.updateJob(id, i === 1 ? { tokenId: "tok_1" } : { sandboxSeq: i + 1 });
    if (i % 5 === 0) await store.listJobEvents(id, 0);
    if (i % 4 === 0) {
      const claimed = await store.claimLifecycleEvents({ limit: 100, claimMs: 30_000 });
      await store.deleteLifecycleEvents(claimed.map((c) => c.seq));
    }
  }
  await store.markPermissionDelivered(id, "perm_1");
}

/** CPU ms per job of `jobs` simulated jobs. */
async function round(jobs: number): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < jobs; i++) await oneJob();
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / jobs;
}

const report = startReport("orchestrator-store-calls");
try {
  // Warm both paths (V8's tiers, the statement cache) before measuring.
  CompiledOnce.prototype.compile = builtEachCall;
  await round(50);
  CompiledOnce.prototype.compile = compiledOnce;
  await round(50);
  const built: number[] = [];
  const once: number[] = [];
  for (let r = 0; r < options.rounds; r++) {
    CompiledOnce.prototype.compile = builtEachCall;
    built.push(await round(options.jobs));
    CompiledOnce.prototype.compile = compiledOnce;
    once.push(await round(options.jobs));
    console.log(
      `round ${r + 1}: CPU per simulated job, built each call ${built.at(-1)!.toFixed(2)} ms, compiled once ${once.at(-1)!.toFixed(2)} ms`,
    );
  }
  console.log(
    `CPU per simulated job (${options.jobs} jobs a round, median of ${options.rounds}): built each call ${median(built).toFixed(2)} ms, compiled once ${median(once).toFixed(2)} ms`,
  );
  report.ratio(
    "compiled once / built each call, CPU per job",
    once.map((x, i) => x / built[i]!),
  );
} finally {
  CompiledOnce.prototype.compile = compiledOnce;
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  report.end();
}
