// needs: kafka
// The canary: a job whose task, instructions, prompts, tool inputs and
// outputs, model text, files, skills and structured result each carry a
// unique marker goes through the real service (its own process, logging at
// debug) into real Kafka; the whole topic, the Watch stream, the Transcript,
// the service's logs and its data folder are searched, and no marker appears.
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { toJsonString } from "@bufbuild/protobuf";
import { FINISH_SUMMARY } from "@oz0/events";
import { createEventPublisher, type EventPublisher, type LifecycleSource } from "@oz0/events-client";
import { PublicEventSchema, TranscriptResponseSchema } from "@oz0/proto/oz0/events/v1/events_pb";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { startEventsProcess, type EventsProcess } from "./fixtures/events-process.js";
import { readTopic } from "./fixtures/kafka-topic.js";
import { canaryJob, canaryMarkers } from "./fixtures/recorded-jobs.js";
import { testCredentials } from "@oz0/serving/testing";

const brokers = (process.env.KAFKA_BROKERS ?? "").split(",").filter(Boolean);
const topic = `oz0.canary.${Date.now()}`;
const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-canary-"));
let service: EventsProcess;
/** A publisher per producer, each with its service's credential: an event goes with its source's. */
const publishers = new Map<LifecycleSource, EventPublisher>();
const publisherLog: string[] = [];

before(async () => {
  assert.ok(brokers.length > 0, "KAFKA_BROKERS must point at a broker (npm test starts one)");
  service = await startEventsProcess({
    KAFKA_BROKERS: brokers.join(","),
    OZ0_KAFKA_TOPIC: topic,
    OZ0_EVENTS_DATA: dataDir,
    OZ0_LOG_LEVEL: "debug",
  });
  for (const source of ["orchestrator", "llm-proxy"] as const)
    publishers.set(
      source,
      createEventPublisher({
        token: testCredentials.services[source],
        url: service.url,
        logger: {
          warn: (obj, msg) => publisherLog.push(JSON.stringify({ obj, msg })),
          error: (obj, msg) => publisherLog.push(JSON.stringify({ obj, msg })),
        },
      }),
    );
});

after(async () => {
  for (const publisher of publishers.values()) await publisher.close();
  await service?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

function assertNoMarker(haystack: string, where: string, markers: Record<string, string>): void {
  for (const [field, marker] of Object.entries(markers)) {
    assert.ok(!haystack.includes(marker), `the ${field} marker leaked into ${where}`);
  }
  // The run prefix itself must not leak either (a marker cut short is still a leak).
  const prefix = Object.values(markers)[0]!.split("x")[0]!;
  assert.ok(!haystack.includes(prefix), `a canary marker prefix leaked into ${where}`);
}

void test("no sensitive field reaches Kafka, Watch, Transcript, the logs or the disk", async () => {
  const markers = canaryMarkers();
  const jobId = "job-canary";
  const raw = canaryJob(jobId, markers);
  // In order, each event with the credential of the service it says sent it (the malformed ones the orchestrator's).
  for (const event of raw) {
    const publisher = publishers.get(event.source as LifecycleSource) ?? publishers.get("orchestrator")!;
    publisher.publish(event);
    await publisher.flush();
  }

  const expected = raw.length - 2; // the malformed id and the malformed type are refused
  const watched = await watchAll(service.url, { jobId });
  assert.equal(watched.length, expected);
  const messages = await readTopic({ brokers, topic, atLeast: expected });
  assert.equal(messages.length, expected, "every accepted event is on the topic once");
  const transcript = await eventsClient(service.url).transcript({ jobId });

  // Useful, not just empty: the safe parts are there.
  const operation = transcript.rows.find(
    (r) => r.row.case === "operation" && r.row.value.operationInvocationId === "inv-1",
  );
  assert.ok(operation?.row.case === "operation");
  assert.deepEqual(
    operation.row.value.steps.map((s) => s.label),
    ["Requested read", "read uploads/order-4831.pdf", FINISH_SUMMARY],
  );
  assert.equal(operation.row.value.taskChars, markers.opTask!.length);
  const submitted = watched.find((e) => e.type === "job.created")!;
  assert.equal(submitted.attributes?.task_chars, `Extract order 4831 ${markers.task}`.length);
  const unknown = watched.find((e) => e.type === "custom.thing_happened")!;
  assert.equal(unknown.reduced, true);
  assert.deepEqual(unknown.attributes, {});
  for (const message of messages) {
    assert.equal(message.key, jobId);
    assert.equal(message.headers.ce_specversion, "1.0");
    assert.equal(message.headers["content-type"], "application/json");
    assert.equal(message.headers.ce_subject, jobId);
    assert.match(message.headers.ce_type!, /^dev\.oz0\.[a-z_.]+\.v1$/);
  }
  assert.deepEqual(messages.map((m) => m.headers.ce_id).sort(), watched.map((e) => e.id).sort());

  assertNoMarker(JSON.stringify(messages), "the Kafka topic", markers);
  assertNoMarker(JSON.stringify(watched.map((e) => toJsonString(PublicEventSchema, e))), "the Watch stream", markers);
  assertNoMarker(toJsonString(TranscriptResponseSchema, transcript), "the Transcript", markers);
  assertNoMarker(service.output(), "the service logs", markers);
  assertNoMarker(publisherLog.join("\n"), "the publisher's logs", markers);
  for (const file of readdirSync(dataDir)) {
    assertNoMarker(readFileSync(path.join(dataDir, file)).toString("latin1"), `the data folder (${file})`, markers);
  }
  // The logs are not empty: the search above looked at something.
  assert.match(service.output(), /events ready/);
});
