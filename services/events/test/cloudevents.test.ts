// The Kafka message of a public event: CloudEvents binary-mode headers, and
// the hand-written JSON printer held equal to protobuf-es's own.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { create, toJson } from "@bufbuild/protobuf";
import { publicEventJson, redactEvent, toKafkaMessage } from "@oz0/events";
import { rawEvent } from "@oz0/events-client";
import {
  PublicEventSchema,
  TokenCountsSchema,
  type PublicEvent,
  type RawEvent,
} from "@oz0/proto/oz0/events/v1/events_pb";
import { foreignEvent } from "./fixtures/foreign-event.js";

function redacted(...args: Parameters<typeof rawEvent>): PublicEvent {
  return redactedOk(rawEvent(...args));
}

function redactedOk(raw: RawEvent): PublicEvent {
  const outcome = redactEvent(raw);
  assert.ok(outcome.ok);
  return outcome.event;
}

void describe("publicEventJson", () => {
  const cases: [string, PublicEvent][] = [
    [
      "a full event",
      redacted("llm.call_completed", {
        jobId: "j",
        sessionId: "s",
        toolCallId: "t",
        operationInvocationId: "o",
        graphRunId: "g",
        graphStepId: "gs",
        agentName: "a",
        agentVersion: "1",
        status: "completed",
        source: "llm-proxy",
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        tokens: { inputTokens: 1, outputTokens: 2, cacheReadTokens: 3, cacheWriteTokens: 4 },
        attributes: { provider: "anthropic", model: "m", attempts: 2 },
      }),
    ],
    ["a minimal event", redacted("job.created", {})],
    ["an unknown type", redactedOk(foreignEvent("custom.thing", { jobId: "j" }))],
    ["zero tokens", redacted("job.created", { tokens: {} })],
    [
      "whole seconds",
      { ...redacted("job.created"), time: { $typeName: "google.protobuf.Timestamp", seconds: 1767607200n, nanos: 0 } },
    ],
    [
      "microseconds",
      {
        ...redacted("job.created"),
        time: { $typeName: "google.protobuf.Timestamp", seconds: 1767607200n, nanos: 123456000 },
      },
    ],
    [
      "nanoseconds",
      { ...redacted("job.created"), time: { $typeName: "google.protobuf.Timestamp", seconds: 1767607200n, nanos: 5 } },
    ],
  ];
  for (const [name, event] of cases) {
    void test(`prints ${name} as protobuf-es does (without the position)`, () => {
      const withPosition = { ...event, position: 42n };
      assert.deepEqual(
        JSON.parse(publicEventJson(withPosition)),
        toJson(PublicEventSchema, { ...event, position: 0n }),
      );
    });
  }
  void test("tokens with only zeros still print as an empty object, as protobuf-es does", () => {
    const event = create(PublicEventSchema, { id: "x", type: "job.created", tokens: create(TokenCountsSchema) });
    assert.deepEqual(JSON.parse(publicEventJson(event)), toJson(PublicEventSchema, event));
  });
});

void describe("toKafkaMessage", () => {
  void test("puts the CloudEvents attributes in headers and keys by job", () => {
    const event = redacted("tool.called", {
      id: "ev-1",
      jobId: "job-9",
      source: "orchestrator",
      time: new Date("2026-01-05T10:00:00.250Z"),
      traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      attributes: { tool_name: "read" },
    });
    const message = toKafkaMessage(publicEventJson(event));
    assert.equal(message.key, "job-9");
    assert.deepEqual(message.headers, {
      ce_specversion: "1.0",
      ce_id: "ev-1",
      ce_source: "/oz0/orchestrator",
      ce_type: "dev.oz0.tool.called.v1",
      ce_time: "2026-01-05T10:00:00.250Z",
      ce_subject: "job-9",
      traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "content-type": "application/json",
    });
    assert.equal(JSON.parse(message.value).attributes.label, "read");
  });

  void test("an event outside a job has no key and its session as subject", () => {
    const message = toKafkaMessage(publicEventJson(redacted("session.started", { sessionId: "s-1" })));
    assert.equal(message.key, null);
    assert.equal(message.headers.ce_subject, "s-1");
    assert.equal(message.headers.ce_source, "/oz0/events");
  });
});

void describe("poolSmallZeroFilledBuffers", () => {
  void test("small Buffer.alloc calls stay zero-filled from a dirtied pool; filled and large ones are untouched", async () => {
    // It changes Buffer.alloc for a whole thread, so it runs in a thread of its own.
    const { Worker } = await import("node:worker_threads");
    const source = `
      const { parentPort } = require("node:worker_threads");
      const { poolSmallZeroFilledBuffers } = await import(${JSON.stringify(import.meta.resolve("@oz0/events"))});
      poolSmallZeroFilledBuffers();
      poolSmallZeroFilledBuffers();
      const first = Buffer.alloc(512);
      // Dirty the whole pool, the part not handed out yet included.
      new Uint8Array(first.buffer).fill(0xab);
      const small = Buffer.alloc(512);
      parentPort.postMessage({
        smallZero: small.every((b) => b === 0),
        pooled: small.buffer === first.buffer,
        filled: Buffer.alloc(4, 7).every((b) => b === 7),
        largeZero: Buffer.alloc(Buffer.poolSize).every((b) => b === 0),
        largeOwn: Buffer.alloc(Buffer.poolSize).buffer.byteLength === Buffer.poolSize,
      });
    `;
    const worker = new Worker(`(async () => {${source}})()`, { eval: true });
    const result = await new Promise((resolve, reject) => {
      worker.once("message", resolve);
      worker.once("error", reject);
    });
    await worker.terminate();
    assert.deepEqual(result, { smallZero: true, pooled: true, filled: true, largeZero: true, largeOwn: true });
  });
});
