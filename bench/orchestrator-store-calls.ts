// The orchestrator's job store on SQLite, a job's store calls in one process:
// the hot queries compiled once per engine and shape
// (services/orchestrator/src/store/compiled-once.ts) against the same
// queries built and compiled by Kysely on every call, as the store ran them
// before, alternating in the same run (issue 24); and, compiled once, the
// store calls a job made before the orchestrator's cuts of 2026-12-02
// against those it makes after them; and those with the messages that
// arrive together stored in one append (7 appends of the same 14 events
// instead of 11, and one read of the job's row fewer).
//
// A simulated job makes the calls control-plane-cost.ts counted per job of
// the Python fake harness in the orchestrator (its SQL statements, counted by
// text). Before the cuts: 11 appends (events, the job's row, lifecycle events
// in 5 of them, one permission), 7 reads of the job's row, 4 updates of it
// (its token, its node, the sandbox's `started` and `exited` positions), 2
// reads of its events (a watcher's page, then the empty one after it), 3
// claims of the lifecycle outbox and the deletes of what was shipped, one
// permission marked delivered. After them: 5 reads of the row (a watcher
// reads it once; RunAgent answers without reading it back), 2 updates (the
// sandbox's positions ride on the next append or the job's end), 1 read of
// its events (a short page is the last), 2 claims (a commit's nudge lingers
// 100 ms, so jobs share a claim). "Built each call" swaps CompiledOnce's
// compile for its `built` (Kysely's builder and compiler, as before);
// everything else (the store's code, better-sqlite3's cached statements, the
// file's transactions) is the same.
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

/** How many of each call a simulated job makes; `appends` lists the events each append stores. */
interface JobCalls {
  appends: readonly number[];
  jobReads: number;
  jobUpdates: number;
  eventReads: number;
  ships: number;
}

/** 14 events in 11 appends, one per session message. */
const ONE_PER_MESSAGE = [2, 1, 1, 1, 2, 1, 1, 1, 2, 1, 1];
const BEFORE_CUTS: JobCalls = { appends: ONE_PER_MESSAGE, jobReads: 7, jobUpdates: 4, eventReads: 2, ships: 3 };
const AFTER_CUTS: JobCalls = { appends: ONE_PER_MESSAGE, jobReads: 5, jobUpdates: 2, eventReads: 1, ships: 2 };
/** The same 14 events in 7 appends (messages that arrive together stored at once), one read of the row fewer. */
const AFTER_BURSTS: JobCalls = { appends: [2, 2, 3, 2, 2, 2, 1], jobReads: 4, jobUpdates: 2, eventReads: 1, ships: 2 };

async function oneJob(calls: JobCalls): Promise<void> {
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
  const appends = calls.appends.length;
  const shipEvery = Math.ceil(appends / calls.ships);
  for (let i = 0; i < appends; i++) {
    if (i < calls.jobReads) await store.getJob(id);
    await store.append({
      jobId: id,
      events: Array.from({ length: calls.appends[i]! }, (_, n) => text(`step ${i}.${n}`)),
      job: { sandboxSeq: i + 1, ...(i === 0 ? { state: "running" as const, startedAt: new Date() } : {}) },
      ...(i % 2 === 0 ? { lifecycle: [rawEvent("tool.called", { jobId: id })] } : {}),
      ...(i === Math.floor(appends / 2) ? { permissions: [permission] } : {}),
    });
    if (i < calls.jobUpdates)
      await store.updateJob(
        id,
        i === 0 ? { tokenId: "tok_1" } : i === 1 ? { sandboxUrl: "http://node" } : { sandboxSeq: i + 1 },
      );
    if (i < calls.eventReads) await store.listJobEvents(id, 0);
    if (i % shipEvery === shipEvery - 1 || i === appends - 1) {
      const claimed = await store.claimLifecycleEvents({ limit: 100, claimMs: 30_000 });
      await store.deleteLifecycleEvents(claimed.map((c) => c.seq));
    }
  }
  await store.markPermissionDelivered(id, "perm_1");
}

/** CPU ms per job of `jobs` simulated jobs. */
async function round(jobs: number, calls: JobCalls): Promise<number> {
  const before = process.cpuUsage();
  for (let i = 0; i < jobs; i++) await oneJob(calls);
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 1000 / jobs;
}

const report = startReport("orchestrator-store-calls");
try {
  // Warm both paths (V8's tiers, the statement cache) before measuring.
  CompiledOnce.prototype.compile = builtEachCall;
  await round(50, BEFORE_CUTS);
  CompiledOnce.prototype.compile = compiledOnce;
  await round(50, BEFORE_CUTS);
  await round(50, AFTER_CUTS);
  await round(50, AFTER_BURSTS);
  const built: number[] = [];
  const once: number[] = [];
  const cut: number[] = [];
  const bursts: number[] = [];
  for (let r = 0; r < options.rounds; r++) {
    CompiledOnce.prototype.compile = builtEachCall;
    built.push(await round(options.jobs, BEFORE_CUTS));
    CompiledOnce.prototype.compile = compiledOnce;
    once.push(await round(options.jobs, BEFORE_CUTS));
    cut.push(await round(options.jobs, AFTER_CUTS));
    bursts.push(await round(options.jobs, AFTER_BURSTS));
    console.log(
      `round ${r + 1}: CPU per simulated job, built each call ${built.at(-1)!.toFixed(2)} ms, compiled once ${once.at(-1)!.toFixed(2)} ms, compiled once with the calls after the cuts ${cut.at(-1)!.toFixed(2)} ms, and with bursts stored at once ${bursts.at(-1)!.toFixed(2)} ms`,
    );
  }
  console.log(
    `CPU per simulated job (${options.jobs} jobs a round, median of ${options.rounds}): built each call ${median(built).toFixed(2)} ms, compiled once ${median(once).toFixed(2)} ms, the calls after the cuts ${median(cut).toFixed(2)} ms, bursts stored at once ${median(bursts).toFixed(2)} ms`,
  );
  report.ratio(
    "compiled once / built each call, CPU per job",
    once.map((x, i) => x / built[i]!),
  );
  report.ratio(
    "the calls after the cuts / before them, CPU per job",
    cut.map((x, i) => x / once[i]!),
  );
  report.ratio(
    "bursts stored at once / one append per message, CPU per job",
    bursts.map((x, i) => x / cut[i]!),
  );
} finally {
  CompiledOnce.prototype.compile = compiledOnce;
  await store.close();
  rmSync(dir, { recursive: true, force: true });
  report.end();
}
