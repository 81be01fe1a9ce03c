// Durable harness operations across a real orchestrator crash (SIGKILL and a
// new process on the same data directory), with the fake harness and the
// scripted model:
// - killed before the checkpoint: the operation runs again (the scratch
//   loop's model is asked a second time) and the job succeeds;
// - killed after the checkpoint committed but before the parent got the
//   result: the recorded result is delivered, the model is not asked again.
// And cancelling the parent job cancels its running operation.
import { bearerInterceptor } from "@oz0/serving";
import assert from "node:assert/strict";
import Database from "better-sqlite3";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { EventsService, OperationStatus } from "@oz0/proto/oz0/events/v1/events_pb";
import type { OperationCheckpoint } from "../src/operations/operation-checkpoints.js";
import { liveTokensOf } from "./support/proxy-tokens.js";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(repoRoot, "examples", "plugins", "shipments");
const booking = path.join(plugin, "documents", "booking-4831.txt");

/** Scratch model calls per task, and what each parent's last turn was shown. */
const scratchCalls = new Map<string, number>();
const parentSaw = new Map<string, string>();
const scratchInputs: string[] = [];
let releaseFirstAttempts!: () => void;
const firstAttemptsReleased = new Promise<void>((r) => (releaseFirstAttempts = r));

function firstUserText(request: ScriptedRequest): string {
  const first = (request.body?.messages as { content: unknown }[] | undefined)?.[0]?.content;
  return typeof first === "string" ? first : "";
}

async function pick({
  turn,
  request,
}: {
  input: string;
  turn: number;
  request: ScriptedRequest;
}): Promise<ScriptedTurn> {
  const system = JSON.stringify(request.body?.system ?? "");
  const input = firstUserText(request).split("\n")[0]!;
  if (system.includes("## Harness operation: extract_shipment")) {
    const calls = (scratchCalls.get(input) ?? 0) + 1;
    scratchCalls.set(input, calls);
    scratchInputs.push(firstUserText(request));
    // Repair: not JSON at all, then JSON of the wrong shape, then (when allowed) a valid result.
    if (input.startsWith("task-repair") || input.startsWith("task-never-valid")) {
      if (calls === 1) return { text: "Here is the shipment: SHP-4831" };
      if (calls === 2 || input.startsWith("task-never-valid"))
        return { text: JSON.stringify({ shipmentReference: 4831 }) };
      return {
        text: JSON.stringify({
          shipmentReference: "SHP-4831",
          pickupCountry: "DE",
          deliveryCountry: "FR",
          sourceFiles: [],
        }),
      };
    }
    // The first attempt hangs in its model call until the test is over: the orchestrator dies meanwhile.
    if (calls === 1) await firstAttemptsReleased;
    return {
      text: JSON.stringify({
        shipmentReference: "SHP-4831",
        pickupCountry: "DE",
        deliveryCountry: "FR",
        sourceFiles: ["booking-4831.txt"],
      }),
    };
  }
  // The parent: its input names the task; one operation call, then an answer.
  if (turn === 0) return { toolCalls: [{ name: "extract_shipment", input: { task: input } }] };
  parentSaw.set(input, JSON.stringify(request.body?.messages ?? []));
  return { text: "done" };
}

let t: TestStack;
before(async () => {
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stdout + installed.stderr);
});
after(async () => {
  releaseFirstAttempts();
  await t.close();
});

async function startJob(task: string): Promise<string> {
  const started = await t.cli(["run", "shipment-orchestrator", task, "--attach", booking, "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  return started.stdout.trim();
}

/** The job's (one) operation record, read from the orchestrator's SQLite store. */
function checkpointOf(jobId: string): OperationCheckpoint | undefined {
  const db = new Database(path.join(t.home, "orchestrator.db"), { readonly: true });
  try {
    const row = db.prepare("SELECT record FROM operation_checkpoints WHERE job_id = ?").get(jobId) as
      { record: string } | undefined;
    return row ? (JSON.parse(row.record) as OperationCheckpoint) : undefined;
  } finally {
    db.close();
  }
}

/** Every token minted for the job is revoked once it ended: the abandoned scratch session's too, which only the dead process held. */
async function assertNoLiveTokens(jobId: string): Promise<void> {
  await eventually(async () => (liveTokensOf(t.home, jobId).length === 0 ? true : undefined)).catch(() =>
    assert.fail(`tokens still live for sessions ${liveTokensOf(t.home, jobId).join(", ")} of the ended job ${jobId}`),
  );
}

/** Replaces the record, as the orchestrator would have written it. */
function writeCheckpoint(record: OperationCheckpoint): void {
  const db = new Database(path.join(t.home, "orchestrator.db"));
  try {
    db.pragma("busy_timeout = 5000");
    db.prepare("UPDATE operation_checkpoints SET record = ?, delivered = ? WHERE job_id = ? AND call_id = ?").run(
      JSON.stringify(record),
      record.delivered ? 1 : 0,
      record.jobId,
      record.callId,
    );
  } finally {
    db.close();
  }
}

void test("a crash before the checkpoint runs the operation again", async () => {
  const task = "task-before-checkpoint";
  const jobId = await startJob(task);
  await eventually(async () => (scratchCalls.get(task) === 1 ? true : undefined));
  assert.equal((await eventually(async () => checkpointOf(jobId))).status, "running");

  await t.restartOrchestrator();
  const watched = await t.cli(["jobs", "watch", jobId]);
  assert.equal(watched.code, 0, watched.stdout + watched.stderr);
  assert.equal(scratchCalls.get(task), 2, "asked again: nothing was recorded");
  const record = checkpointOf(jobId)!;
  assert.deepEqual([record.status, record.delivered, record.scratchSessionIds.length], ["validated", true, 2]);
  assert.match(parentSaw.get(task)!, /SHP-4831/);
  await assertNoLiveTokens(jobId);
});

void test("a crash after the checkpoint reuses the recorded result", async () => {
  const task = "task-after-checkpoint";
  const jobId = await startJob(task);
  await eventually(async () => (scratchCalls.get(task) === 1 ? true : undefined));
  // The state a crash leaves right after the checkpoint commits and before the
  // parent's answer is written: status validated, not delivered. (The attempt
  // itself still hangs in its model call, so this process never touches the record.)
  const record = await eventually(async () => checkpointOf(jobId));
  record.status = "validated";
  record.result = {
    shipmentReference: "FROM-CHECKPOINT",
    pickupCountry: "DE",
    deliveryCountry: "FR",
    sourceFiles: ["booking-4831.txt"],
  };
  writeCheckpoint(record);

  await t.restartOrchestrator();
  const watched = await t.cli(["jobs", "watch", jobId]);
  assert.equal(watched.code, 0, watched.stdout + watched.stderr);
  assert.equal(scratchCalls.get(task), 1, "the model was not asked again");
  assert.match(parentSaw.get(task)!, /FROM-CHECKPOINT/);
  assert.equal(checkpointOf(jobId)!.delivered, true);
  await assertNoLiveTokens(jobId);
});

void test("cancelling the parent job cancels its running operation", async () => {
  const task = "task-cancelled-with-parent";
  const jobId = await startJob(task);
  await eventually(async () => (scratchCalls.get(task) === 1 ? true : undefined));
  const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "testing cancel"]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  const watched = await t.cli(["jobs", "watch", jobId]);
  assert.equal(watched.code, 4, watched.stdout + watched.stderr);
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  const row = await eventually(async () => {
    const response = await events.transcript({ jobId });
    const found = response.rows.flatMap((r) => (r.row.case === "operation" ? [r.row.value] : []))[0];
    return found && found.status !== OperationStatus.RUNNING ? found : undefined;
  });
  assert.equal(row.status, OperationStatus.CANCELLED);
  assert.equal(row.errorCode, "operation_cancelled");
  const record = (await eventually(async () => checkpointOf(jobId)))!;
  assert.equal(record.status, "failed");
  assert.equal(scratchCalls.get(task), 1);
});

void test("schema-invalid output is repaired with the validator's errors, and fails as a tool error after the bound", async () => {
  const repaired = await t.cli(["run", "shipment-orchestrator", "task-repair", "--attach", booking]);
  assert.equal(repaired.code, 0, repaired.stdout + repaired.stderr);
  assert.equal(scratchCalls.get("task-repair"), 3, "the first answer and two repairs");
  assert.match(parentSaw.get("task-repair")!, /SHP-4831/);
  const repairs = scratchInputs.filter((i) => i.startsWith("task-repair"));
  assert.equal(repairs[0], "task-repair");
  assert.match(repairs[1]!, /did not validate[\s\S]*finish with only a JSON object/);
  assert.match(repairs[2]!, /did not validate[\s\S]*\/shipmentReference must be string/);

  const failed = await t.cli(["run", "shipment-orchestrator", "task-never-valid", "--attach", booking]);
  assert.equal(failed.code, 0, failed.stdout + failed.stderr);
  assert.equal(scratchCalls.get("task-never-valid"), 3, "one attempt and two repairs, then no more");
  const saw = parentSaw.get("task-never-valid")!;
  assert.match(
    saw,
    /operation_result_invalid: extract_shipment returned no result valid against its result_schema after 2 repair attempt\(s\)/,
  );
  assert.match(saw, /"is_error":true/);
});
