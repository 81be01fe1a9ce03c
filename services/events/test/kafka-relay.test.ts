// needs: kafka
// The relay on a real broker: large events of one job (one partition) are
// split into produce requests the broker accepts, and arrive in order.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { startEvents, type RunningEvents } from "@oz0/events";
import { createEventPublisher, rawEvent } from "@oz0/events-client";
import { readTopic } from "./fixtures/kafka-topic.js";
import { testCredentials } from "@oz0/serving/testing";

const brokers = (process.env.KAFKA_BROKERS ?? "").split(",").filter(Boolean);
const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-relay-"));
let service: RunningEvents | undefined;

after(async () => {
  await service?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

void test("a batch of large events of one job stays under the broker's request size, and keeps its order", async () => {
  assert.ok(brokers.length > 0, "KAFKA_BROKERS must point at a broker (npm test starts one)");
  const topic = `oz0.relay.${Date.now()}`;
  service = await startEvents({
    auth: testCredentials.settingsFor("events"),
    dataDir,
    kafkaBrokers: brokers,
    topic,
    partitions: 3,
  });
  // Over 1 KB of JSON each (a 500-character path, and a label composed from
  // it): 1 500 of them in one partition are more than a broker takes at once.
  const long = `uploads/${"d/".repeat(246)}order.pdf`;
  const publisher = createEventPublisher({
    token: testCredentials.services.orchestrator,
    url: service.url,
    maxBatch: 1_500,
  });
  publisher.publish(
    Array.from({ length: 1_500 }, (_, i) =>
      rawEvent("tool.called", {
        jobId: "job-large",
        source: "sandbox",
        toolCallId: `call-${i}`,
        attributes: { tool_name: "read", path: long },
      }),
    ),
  );
  await publisher.flush();
  await publisher.close();

  // A fresh broker creates its offsets topic for the first consumer group: allow for it.
  const messages = await readTopic({ brokers, topic, atLeast: 1_500, timeoutMs: 120_000 });
  assert.equal(messages.length, 1_500);
  assert.ok(
    messages.every((m) => m.value.length > 1_000),
    "the events are as large as intended",
  );
  assert.equal(new Set(messages.map((m) => m.partition)).size, 1, "one job, one partition");
  messages.sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)));
  const calls = messages.map((m) => (JSON.parse(m.value) as { toolCallId: string }).toolCallId);
  assert.deepEqual(
    calls,
    Array.from({ length: 1_500 }, (_, i) => `call-${i}`),
  );
});
