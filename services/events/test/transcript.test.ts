// Transcript grouping and attribution on recorded event sequences, through
// the real service (embedded default: local log, no Kafka).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { startEvents, type RunningEvents } from "@oz0/events";
import { rawEvent } from "@oz0/events-client";
import { OperationStatus, type OperationRow, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import { eventsClient } from "./fixtures/events-client.js";
import { foreignEvent } from "./fixtures/foreign-event.js";
import { legacyWithoutInvocationIds, threeWithTwoOverlapping, twoOverlapping } from "./fixtures/recorded-jobs.js";
import { testCredentials } from "@oz0/serving/testing";

let events: RunningEvents;
before(async () => {
  events = await startEvents({ auth: testCredentials.settingsFor("events"), port: 0 });
});
after(async () => {
  await events.close();
});

async function transcriptOf(
  jobId: string,
  raw: Parameters<ReturnType<typeof eventsClient>["publish"]>[0]["events"],
): Promise<TranscriptResponse> {
  const client = eventsClient(events.url);
  const published = await client.publish({ events: raw });
  assert.equal(published.accepted, raw?.length);
  return client.transcript({ jobId });
}

function operations(transcript: TranscriptResponse): Map<string, OperationRow> {
  const rows = new Map<string, OperationRow>();
  for (const row of transcript.rows)
    if (row.row.case === "operation") rows.set(row.row.value.operationInvocationId, row.row.value);
  return rows;
}

void describe("Transcript", () => {
  void test("two overlapping operations form one group of two, each with its own ordered steps", async () => {
    const transcript = await transcriptOf("job-two", twoOverlapping("job-two"));
    const rows = operations(transcript);
    assert.equal(rows.size, 2);
    const a = rows.get("a")!;
    const b = rows.get("b")!;
    assert.equal(a.title, "Harness · extract_shipment");
    assert.equal(a.status, OperationStatus.COMPLETED);
    assert.equal(a.resultValidation, "valid");
    assert.equal(a.taskChars, 42);
    assert.equal(a.timeoutMs, 60000);
    assert.equal(a.durationMs, 1000);
    assert.deepEqual(
      a.steps.map((s) => s.label),
      ["Requested read", "read in/a.pdf"],
    );
    assert.deepEqual(
      b.steps.map((s) => s.label),
      ["Requested read"],
    );
    assert.equal(a.parallelGroupSize, 2);
    assert.equal(b.parallelGroupSize, 2);
    assert.equal(a.parallelPosition, 1);
    assert.equal(b.parallelPosition, 2);
    assert.equal(a.parallelGroupId, b.parallelGroupId);
    assert.deepEqual(
      transcript.parallelGroups.map((g) => g.operationInvocationIds),
      [["a", "b"]],
    );
    assert.equal(a.attributionPartial, false);
    assert.equal(b.attributionPartial, false);
    // Every event of the sequence is inside a row: no parent-timeline rows.
    assert.equal(transcript.rows.length, 2);
  });

  void test("three operations with two overlapping: one group of two, the third alone", async () => {
    const transcript = await transcriptOf("job-three", threeWithTwoOverlapping("job-three"));
    const rows = operations(transcript);
    const [a, b, c] = ["a", "b", "c"].map((id) => rows.get(id)!);
    assert.equal(a!.parallelGroupSize, 2);
    assert.equal(b!.parallelGroupSize, 2);
    assert.deepEqual([a!.parallelPosition, b!.parallelPosition], [1, 2]);
    // c starts exactly when b ends: that is sequence, not overlap.
    assert.equal(c!.parallelGroupSize, 1);
    assert.equal(c!.parallelGroupId, "");
    assert.equal(transcript.parallelGroups.length, 1);
    assert.deepEqual(transcript.parallelGroups[0]!.operationInvocationIds, ["a", "b"]);
    assert.deepEqual(
      b!.steps.map((s) => s.label),
      ["Requested read", "read in/b.pdf"],
    );
    // Rows are in order of their start.
    assert.deepEqual(
      transcript.rows.map((r) => (r.row.case === "operation" ? r.row.value.operationInvocationId : r.row.case)),
      ["a", "b", "c"],
    );
  });

  void test("legacy steps without invocation ids stay in the parent timeline and mark the rows they may belong to partial", async () => {
    const transcript = await transcriptOf("job-legacy", legacyWithoutInvocationIds("job-legacy"));
    const rows = operations(transcript);
    const [a, b, c] = ["a", "b", "c"].map((id) => rows.get(id)!);
    for (const row of [a!, b!, c!]) {
      assert.equal(row.steps.length, 0, "nothing is guessed onto a row");
      assert.equal(row.attributionPartial, true);
      assert.match(row.attributionNote, /cannot be attributed to exactly one invocation/);
    }
    assert.equal(a!.parallelGroupSize, 2);
    assert.equal(c!.parallelGroupSize, 1);
    const parentSteps = transcript.rows.filter(
      (r) => r.row.case === "event" && r.row.value.type === "harness.operation_step",
    );
    assert.equal(parentSteps.length, 3);
  });

  void test("a new-style row next to legacy activity outside its window is not partial", async () => {
    const transcript = await transcriptOf("job-mixed", [
      ...twoOverlapping("job-mixed", Date.parse("2026-01-06T00:00:00Z")),
      ...legacyWithoutInvocationIds("job-mixed", Date.parse("2026-01-06T01:00:00Z")).filter(
        (e) => e.type === "harness.operation_step",
      ),
    ]);
    const rows = operations(transcript);
    assert.equal(rows.get("a")!.attributionPartial, false);
    assert.equal(rows.get("b")!.attributionPartial, false);
  });

  void test("a running operation overlaps every operation started after it", async () => {
    const sequence = twoOverlapping("job-running").filter(
      (e) => !(e.type === "harness.operation_completed" && e.operationInvocationId === "a"),
    );
    const transcript = await transcriptOf("job-running", sequence);
    const a = operations(transcript).get("a")!;
    assert.equal(a.status, OperationStatus.RUNNING);
    assert.equal(a.resultValidation, "pending");
    assert.equal(a.endedAt, undefined);
    assert.equal(a.parallelGroupSize, 2);
  });

  void test("an operation's token counts add up to at most 2^32 - 1: a transcript whose steps report more still reads", async () => {
    const base = {
      source: "orchestrator",
      jobId: "job-tokens",
      sessionId: "s1",
      toolCallId: "call1",
      operationInvocationId: "inv1",
    };
    const most = { inputTokens: 0xffff_ffff, outputTokens: 3 };
    const transcript = await transcriptOf("job-tokens", [
      rawEvent("harness.operation_started", { ...base, status: "running", attributes: { operation_key: "op" } }),
      rawEvent("harness.operation_step", {
        ...base,
        status: "ok",
        tokens: most,
        attributes: { step_index: 1, step_kind: "model" },
      }),
      rawEvent("harness.operation_step", {
        ...base,
        status: "ok",
        tokens: most,
        attributes: { step_index: 2, step_kind: "model" },
      }),
    ]);
    const row = operations(transcript).get("inv1")!;
    assert.equal(row.tokens?.inputTokens, 0xffff_ffff);
    assert.equal(row.tokens?.outputTokens, 6);
  });

  void test("a type the service does not know adds no step, token or row to an operation, whoever sends it", async () => {
    // Unknown types keep their envelope from any producer: the LLM proxy's credential (as the sandbox's could,
    // while events took it) put 4e9 tokens and a step on the orchestrator's row, and opened rows of its own.
    const base = { jobId: "job-forged", sessionId: "s1", toolCallId: "call1", operationInvocationId: "inv1" };
    const real = await transcriptOf("job-forged", [
      rawEvent("harness.operation_started", {
        ...base,
        source: "orchestrator",
        status: "running",
        attributes: { operation_key: "op" },
      }),
    ]);
    assert.equal(operations(real).get("inv1")?.steps.length, 0);
    const forged = await eventsClient(events.url, "llm-proxy").publish({
      events: [
        foreignEvent("model.call_done", { ...base, status: "completed", tokens: { inputTokens: 4_000_000_000 } }),
        foreignEvent("harness.operation_x", { ...base, operationInvocationId: "inv-fake", status: "running" }),
      ],
    });
    assert.deepEqual([forged.accepted, forged.reduced], [2, 2]);
    const transcript = await eventsClient(events.url).transcript({ jobId: "job-forged" });
    const rows = operations(transcript);
    assert.deepEqual([...rows.keys()], ["inv1"], "no row of the sender's own");
    assert.equal(rows.get("inv1")!.steps.length, 0);
    assert.equal(rows.get("inv1")!.tokens?.inputTokens ?? 0, 0);
    // They stay in the parent timeline, reduced, as the LLM proxy's.
    const parent = transcript.rows.flatMap((r) => (r.row.case === "event" ? [r.row.value] : []));
    assert.deepEqual(
      parent.map((e) => [e.type, e.source, e.reduced]),
      [
        ["model.call_done", "llm-proxy", true],
        ["harness.operation_x", "llm-proxy", true],
      ],
    );
  });

  void test("asks for a job id", async () => {
    await assert.rejects(eventsClient(events.url).transcript({ jobId: "" }), /job_id is required/);
  });
});
