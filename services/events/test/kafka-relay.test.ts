// needs: kafka
// The relay on a real broker: large events of one job (one partition) are
// split into produce requests the broker accepts, and arrive in order; a
// Publish is held back while the relay is behind (back-pressure).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { pathToFileURL } from "node:url";
import { redactEvent, startEvents, type RunningEvents } from "@oz0/events";
import { createEventPublisher, rawEvent } from "@oz0/events-client";
import { createLogger } from "@oz0/serving";
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { readTopic } from "./fixtures/kafka-topic.js";
import { testCredentials } from "@oz0/serving/testing";
import type * as RelayModule from "../src/kafka-relay.js";
import type * as OutboxModule from "../src/outbox.js";

// The built relay: its producer runs in a worker thread started from the
// built kafka-producer-worker.js, which src/ (run by tsx) does not have.
const built = (file: string): string => pathToFileURL(path.join(import.meta.dirname, "..", "dist", file)).href;
const { KafkaRelay } = (await import(built("kafka-relay.js"))) as typeof RelayModule;
const { Outbox } = (await import(built("outbox.js"))) as typeof OutboxModule;

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
        source: "orchestrator",
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

void test("a Publish waits while the relay is behind, until the events Kafka has not received are few again", async () => {
  assert.ok(brokers.length > 0, "KAFKA_BROKERS must point at a broker (npm test starts one)");
  const outbox = new Outbox({ dataDir: mkdtempSync(path.join(dataDir, "backpressure-")), relayTail: true });
  const relay = new KafkaRelay({
    brokers,
    topic: `oz0.backpressure.${Date.now()}`,
    outbox,
    logger: createLogger({ name: "events", level: "silent" }),
    batchSize: 100,
    maxBacklog: 100,
    // Never by the clock here: only the relay's progress may release it.
    maxHoldMs: 600_000,
  });
  const events = (count: number, from: number): PublicEvent[] =>
    Array.from({ length: count }, (_, i) => {
      const outcome = redactEvent(rawEvent("graph.step_started", { jobId: `job-${(from + i) % 5}` }));
      assert.ok(outcome.ok);
      return outcome.event;
    });
  try {
    relay.start();
    // Once one event went through, the relay is connected and healthy.
    await outbox.append(events(1, 0));
    relay.wake();
    await relay.caughtUp();
    const deadline = Date.now() + 60_000;
    while (outbox.undeliveredBacklog > 0) {
      assert.ok(Date.now() < deadline, "the relay delivered nothing within a minute");
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(relay.healthy);

    // 2 000 events at once: 20 produce requests behind.
    await outbox.append(events(2_000, 1));
    relay.wake();
    let released = false;
    const held = relay.caughtUp().then(() => {
      released = true;
      return outbox.undeliveredBacklog;
    });
    await new Promise((r) => setImmediate(r));
    assert.equal(released, false, "a Publish behind 2 000 undelivered events is held back");
    assert.ok((await held) <= 100, "it goes on once at most 100 events wait for Kafka");
    // Caught up: the next one is not held.
    let next = false;
    const answered = relay.caughtUp().then(() => (next = true));
    await new Promise((r) => setImmediate(r));
    assert.equal(next, true);
    await answered;
  } finally {
    await relay.close();
    await outbox.close();
  }
});
