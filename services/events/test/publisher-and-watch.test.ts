// The producers' client and the Watch stream on the embedded default (no
// Kafka: the local log only).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { startEvents, type RunningEvents } from "@oz0/events";
import { createEventPublisher, rawAttributes, rawEvent, type PublisherLogger } from "@oz0/events-client";
import { foreignEvent } from "./fixtures/foreign-event.js";
import { freePortForTest } from "./fixtures/free-port.js";
import { startTestEvents } from "./fixtures/test-service.js";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { testCredentials } from "@oz0/serving/testing";

const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

function recordingLogger(): PublisherLogger & { lines: { obj: object; msg?: string }[] } {
  const lines: { obj: object; msg?: string }[] = [];
  return { lines, warn: (obj, msg) => lines.push({ obj, msg }), error: (obj, msg) => lines.push({ obj, msg }) };
}

const service = (options: { dataDir?: string; port?: number } = {}): Promise<RunningEvents> =>
  startTestEvents(cleanup, options);

void describe("the publisher", () => {
  void test("batches, delivers in order, and flush waits until the service accepted everything", async () => {
    const events = await service();
    const publisher = createEventPublisher({
      token: testCredentials.services.orchestrator,
      url: events.url,
      maxBatch: 7,
    });
    for (let i = 0; i < 50; i++)
      publisher.publish(rawEvent("graph.step_started", { jobId: "job-p", attributes: { iteration: i } }));
    await publisher.flush();
    const watched = await watchAll(events.url, { jobId: "job-p" });
    assert.deepEqual(
      watched.map((e) => e.attributes?.iteration),
      Array.from({ length: 50 }, (_, i) => i),
    );
    await publisher.close();
  });

  void test("keeps retrying while the service is down, and logs that it does", async () => {
    const port = await freePortForTest();
    const logger = recordingLogger();
    const publisher = createEventPublisher({
      token: testCredentials.services.orchestrator,
      url: `http://127.0.0.1:${port}`,
      logger,
      maxBackoffMs: 200,
    });
    publisher.publish(rawEvent("job.created", { jobId: "job-late" }));
    const flushed = publisher.flush();
    while (!logger.lines.some((l) => (l.obj as { code?: string }).code === "EVENTS_UNREACHABLE")) {
      await new Promise((r) => setTimeout(r, 20));
    }
    const events = await service({ port });
    await flushed;
    assert.equal((await watchAll(events.url, { jobId: "job-late" })).length, 1);
    await publisher.close();
  });

  void test("when its queue overflows it drops the oldest waiting events, never the batch being sent, and says so", async () => {
    const port = await freePortForTest();
    const logger = recordingLogger();
    const publisher = createEventPublisher({
      token: testCredentials.services.orchestrator,
      url: `http://127.0.0.1:${port}`,
      logger,
      maxBatch: 2,
      maxQueued: 5,
      maxBackoffMs: 100,
    });
    const numbered = Array.from({ length: 10 }, (_, i) =>
      rawEvent("graph.step_started", { jobId: "job-overflow", attributes: { iteration: i } }),
    );
    publisher.publish(numbered.slice(0, 3));
    while (!logger.lines.some((l) => (l.obj as { code?: string }).code === "EVENTS_UNREACHABLE")) {
      await new Promise((r) => setTimeout(r, 20));
    }
    // 0 and 1 are the batch being retried; 2..6 wait; 10 queued > 5 drops 2..6.
    publisher.publish(numbered.slice(3));
    const full = logger.lines.find((l) => (l.obj as { code?: string }).code === "EVENTS_QUEUE_FULL")?.obj as
      { dropped?: number; firstId?: string } | undefined;
    assert.equal(full?.dropped, 5);
    assert.equal(full?.firstId, numbered[2]!.id, "the log names the events really dropped");
    const events = await service({ port });
    await publisher.flush();
    const watched = await watchAll(events.url, { jobId: "job-overflow" });
    assert.deepEqual(
      watched.map((e) => e.attributes?.iteration),
      [0, 1, 7, 8, 9],
    );
    await publisher.close();
  });

  void test("never throws into the caller, and says what it dropped", async () => {
    const logger = recordingLogger();
    const publisher = createEventPublisher({
      token: testCredentials.services.orchestrator,
      url: "http://127.0.0.1:1",
      logger,
    });
    publisher.publish(foreignEvent(""));
    assert.ok(logger.lines.some((l) => (l.obj as { code?: string }).code === "EVENTS_INVALID_EVENT"));
    publisher.publish(rawEvent("job.created", { jobId: "never-delivered" }));
    await publisher.close({ timeoutMs: 50 });
    assert.ok(
      logger.lines.some((l) => (l.obj as { code?: string; dropped?: number }).code === "EVENTS_DROPPED_ON_CLOSE"),
    );
    publisher.publish(rawEvent("job.created", {}));
    assert.ok(logger.lines.some((l) => (l.obj as { code?: string }).code === "EVENTS_PUBLISHER_CLOSED"));
  });

  void test("rawEvent keeps attributes as JSON: undefined dropped, dates as strings, non-finite numbers as null", () => {
    const flat = rawEvent("job.created", {
      attributes: { s: "t", n: 1.5, z: -0, b: false, nil: null, u: undefined, nan: NaN },
    });
    assert.equal(flat.attributes, undefined, "sent as JSON text (attributes_json), not as a Struct");
    assert.deepEqual(rawAttributes(flat), { s: "t", n: 1.5, z: 0, b: false, nil: null, nan: null });
    assert.ok(Object.is(rawAttributes(flat).z, 0));
    const nested = rawEvent("job.created", {
      attributes: { when: new Date(0), input: { command: "ls", skip: undefined }, list: [1, undefined] },
    });
    assert.deepEqual(rawAttributes(nested), {
      when: "1970-01-01T00:00:00.000Z",
      input: { command: "ls" },
      list: [1, null],
    });
  });

  void test("a retried event is accepted once: ids deduplicate", async () => {
    const events = await service();
    const event = rawEvent("job.created", { jobId: "job-dup" });
    const client = eventsClient(events.url);
    const first = await client.publish({ events: [event, event] });
    assert.deepEqual([first.accepted, first.duplicates, first.dropped], [1, 1, 0]);
    const again = await client.publish({ events: [event] });
    assert.equal(again.duplicates, 1);
    assert.equal((await watchAll(events.url, { jobId: "job-dup" })).length, 1);
  });
});

void describe("Watch", () => {
  void test("resumes from a position and filters by job", async () => {
    const events = await service();
    const client = eventsClient(events.url);
    await client.publish({
      events: Array.from({ length: 10 }, (_, i) =>
        rawEvent("graph.step_started", { jobId: i % 2 ? "odd" : "even", attributes: { iteration: i } }),
      ),
    });
    const all = await watchAll(events.url);
    assert.deepEqual(
      all.map((e) => e.position),
      Array.from({ length: 10 }, (_, i) => BigInt(i + 1)),
    );
    const resumed = await watchAll(events.url, { fromPosition: all[5]!.position + 1n });
    assert.deepEqual(
      resumed.map((e) => e.attributes?.iteration),
      [6, 7, 8, 9],
    );
    const odd = await watchAll(events.url, { jobId: "odd" });
    assert.deepEqual(
      odd.map((e) => e.attributes?.iteration),
      [1, 3, 5, 7, 9],
    );
  });

  void test("follows events published after it started", async () => {
    const events = await service();
    const client = eventsClient(events.url);
    const abort = new AbortController();
    const seen: number[] = [];
    const stream = (async () => {
      try {
        for await (const response of client.watch({ jobId: "live" }, { signal: abort.signal })) {
          seen.push(response.event!.attributes!.iteration as number);
          if (seen.length === 3) abort.abort();
        }
      } catch (error) {
        if (!abort.signal.aborted) throw error;
      }
    })();
    for (let i = 0; i < 3; i++) {
      await client.publish({
        events: [rawEvent("graph.step_started", { jobId: "live", attributes: { iteration: i } })],
      });
    }
    await stream;
    assert.deepEqual(seen, [0, 1, 2]);
  });

  void test("the write-ahead log is checkpointed into the database file while the service runs", async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-checkpoint-"));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const events = await service({ dataDir });
    const client = eventsClient(events.url);
    for (let batch = 0; batch < 12; batch++) {
      await client.publish({
        events: Array.from({ length: 500 }, (_, i) =>
          rawEvent("graph.step_started", { jobId: `job-${i % 7}`, attributes: { iteration: i } }),
        ),
      });
    }
    // 6 000 events are about 2 MB of pages: SQLite alone would keep them in
    // the log until it reaches its (raised) threshold of 8 000 pages; the
    // checkpointer copies them over once the log grew by about a megabyte.
    const file = path.join(dataDir, "events.sqlite");
    const deadline = Date.now() + 30_000;
    while (statSync(file).size < 500_000) {
      assert.ok(
        Date.now() < deadline,
        `events.sqlite holds ${statSync(file).size} bytes: the log was not checkpointed`,
      );
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal((await watchAll(events.url)).length, 6000);
  });

  void test("the log survives a restart on the same data folder, positions included", async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-events-restart-"));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const first = await startEvents({ auth: testCredentials.settingsFor("events"), port: 0, dataDir });
    await eventsClient(first.url).publish({
      events: [rawEvent("job.created", { jobId: "durable" }), rawEvent("job.completed", { jobId: "durable" })],
    });
    await first.close();
    const second = await service({ dataDir });
    const watched = await watchAll(second.url, { jobId: "durable" });
    assert.deepEqual(
      watched.map((e) => [e.type, e.position]),
      [
        ["job.created", 1n],
        ["job.completed", 2n],
      ],
    );
  });
});
