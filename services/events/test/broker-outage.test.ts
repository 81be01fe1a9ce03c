// Nothing is lost while the broker is down: a broker of the test's own is
// stopped mid-run, producers keep publishing, the events service itself is
// restarted on the same data folder during the outage, the broker comes
// back, and every accepted event is on the topic exactly once, in order per job.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { startEvents, type RunningEvents } from "@oz0/events";
import { createEventPublisher, rawEvent } from "@oz0/events-client";
import { startKafka, type RunningKafka } from "@oz0/test-infra";
import { watchAll } from "./fixtures/events-client.js";
import { readTopic } from "./fixtures/kafka-topic.js";
import { testCredentials } from "@oz0/serving/testing";

const topic = "oz0.outage.v1";
const jobs = ["job-a", "job-b", "job-c"];
let kafka: RunningKafka;
const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-outage-"));
const running: RunningEvents[] = [];

before(async () => {
  kafka = await startKafka();
});
after(async () => {
  for (const service of running) await service.close();
  await kafka?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

/** `count` events per job, interleaved, numbered per job from `from`. */
function phase(from: number, count: number) {
  const events = [];
  for (let i = from; i < from + count; i++) {
    for (const jobId of jobs) {
      events.push(
        rawEvent("graph.step_started", {
          jobId,
          source: "orchestrator",
          attributes: { step_name: "work", iteration: i },
        }),
      );
    }
  }
  return events;
}

async function publishAll(url: string, events: ReturnType<typeof phase>): Promise<void> {
  const publisher = createEventPublisher({ token: testCredentials.services.orchestrator, url, maxBatch: 50 });
  publisher.publish(events);
  await publisher.flush();
  await publisher.close();
}

void test("a broker outage loses nothing and duplicates nothing", async () => {
  const start = () =>
    startEvents({
      auth: testCredentials.settingsFor("events"),
      dataDir,
      kafkaBrokers: kafka.brokers,
      topic,
      partitions: 3,
    });
  let service = await start();
  running.push(service);

  await publishAll(service.url, phase(0, 100));
  await readTopic({ brokers: kafka.brokers, topic, atLeast: 300 });

  await kafka.stop();
  await publishAll(service.url, phase(100, 100));
  // The local log keeps serving while the broker is away.
  assert.equal((await watchAll(service.url)).length, 600);

  // The service itself restarts during the outage: the outbox is durable.
  await service.close();
  running.pop();
  service = await start();
  running.push(service);
  await publishAll(service.url, phase(200, 100));
  assert.equal((await watchAll(service.url)).length, 900);

  await kafka.restart();
  await publishAll(service.url, phase(300, 100));
  const messages = await readTopic({ brokers: kafka.brokers, topic, atLeast: 1200 });

  const ids = messages.map((m) => m.headers.ce_id);
  assert.equal(new Set(ids).size, 1200, "every event arrived");
  assert.equal(messages.length, 1200, "no event arrived twice");
  for (const jobId of jobs) {
    const ofJob = messages.filter((m) => m.key === jobId);
    assert.equal(new Set(ofJob.map((m) => m.partition)).size, 1, "one job's events share a partition");
    ofJob.sort((a, b) => Number(BigInt(a.offset) - BigInt(b.offset)));
    const iterations = ofJob.map(
      (m) => (JSON.parse(m.value) as { attributes: { iteration: number } }).attributes.iteration,
    );
    assert.deepEqual(
      iterations,
      Array.from({ length: 400 }, (_, i) => i),
      `${jobId}'s events are in order`,
    );
  }
});
