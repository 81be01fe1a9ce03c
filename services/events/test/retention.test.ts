// Retention of the local log: events older than the period are removed,
// oldest first, never one Kafka has not received; positions are never used
// twice; a log from before retention keeps its events a full period; and a
// watcher asking for removed positions is told so, with where to resume.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { redactEvent, startEvents } from "@oz0/events";
import { createEventPublisher, rawEvent } from "@oz0/events-client";
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import Database from "better-sqlite3";
import { Outbox } from "../src/outbox.js";
import { watchAll } from "./fixtures/events-client.js";
import { testCredentials } from "@oz0/serving/testing";

const HOUR = 3_600_000;
const dirs: string[] = [];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-events-retention-"));
  dirs.push(dir);
  return dir;
}

function events(count: number, jobId = "job-r"): PublicEvent[] {
  return Array.from({ length: count }, (_, i) => {
    const outcome = redactEvent(rawEvent("graph.step_started", { jobId, attributes: { iteration: i } }));
    assert.ok(outcome.ok);
    return outcome.event;
  });
}

void describe("the local log's retention", () => {
  void test("removes what is older than the period, oldest first, and never reuses a position", async () => {
    let clock = 0;
    const outbox = new Outbox({ dataDir: tempDir(), now: () => clock });
    try {
      await outbox.append(events(3));
      clock = 10 * HOUR;
      await outbox.append(events(2));
      assert.equal(outbox.prune({ acceptedBefore: 5 * HOUR, keepUndelivered: false }), 3);
      assert.equal(outbox.prunedThrough(), 3n);
      assert.deepEqual(
        outbox.read({ fromPosition: 1n, limit: 10 }).map((e) => e.position),
        [4n, 5n],
      );
      assert.equal(outbox.prune({ acceptedBefore: 5 * HOUR, keepUndelivered: false }), 0, "nothing more is that old");

      // Everything goes; the next event still gets the next position.
      assert.equal(outbox.prune({ acceptedBefore: 20 * HOUR, keepUndelivered: false }), 2);
      assert.equal(outbox.lastPosition(), 5n);
      assert.deepEqual(
        (await outbox.append(events(1))).appended.map((e) => e.position),
        [6n],
      );
    } finally {
      await outbox.close();
    }
  });

  void test("keeps events Kafka has not received, however old", async () => {
    let clock = 0;
    const outbox = new Outbox({ dataDir: tempDir(), now: () => clock });
    try {
      await outbox.append(events(5));
      outbox.markDeliveredThrough(2n);
      clock = 100 * HOUR;
      assert.equal(outbox.prune({ acceptedBefore: 50 * HOUR, keepUndelivered: true }), 2);
      assert.deepEqual(
        outbox.undelivered(10).map((e) => e.position),
        [3n, 4n, 5n],
        "the undelivered ones are all there",
      );
    } finally {
      await outbox.close();
    }
  });

  void test("removes a large backlog in chunks, and a log from before retention keeps its events a full period", async () => {
    const dir = tempDir();
    // A log written before events carried their acceptance time.
    const old = new Database(path.join(dir, "events.sqlite"));
    old.exec(`CREATE TABLE events (position INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, job_id TEXT NOT NULL, event TEXT NOT NULL);
      INSERT INTO events (id, job_id, event) VALUES ('e-old', 'job-old', '{"id":"e-old","type":"job.created"}');`);
    old.close();
    const outbox = new Outbox({ dataDir: dir });
    try {
      assert.equal(
        outbox.prune({ acceptedBefore: Date.now() - HOUR, keepUndelivered: false }),
        0,
        "counted as accepted when the log was upgraded",
      );
      await outbox.append(events(25_000, "job-many"));
      // One step removes at most 10,000, so the service can let Publish calls in between.
      assert.equal(outbox.pruneStep({ acceptedBefore: Date.now() + HOUR, keepUndelivered: false }), 10_000);
      assert.equal(outbox.prune({ acceptedBefore: Date.now() + HOUR, keepUndelivered: false }), 15_001);
      assert.equal(outbox.prunedThrough(), 25_001n);
    } finally {
      await outbox.close();
    }
  });

  void test("a watcher from a removed position is told where to resume; from 0 it starts at the oldest kept", async () => {
    let clock = 0;
    const events = await startEvents({
      auth: testCredentials.settingsFor("events"),
      port: 0,
      dataDir: tempDir(),
      retentionMs: HOUR,
      pruneIntervalMs: 50,
      now: () => clock,
    });
    after(() => events.close());
    const publisher = createEventPublisher({ token: testCredentials.services.orchestrator, url: events.url });
    publisher.publish([
      rawEvent("job.created", { jobId: "job-gone" }),
      rawEvent("job.completed", { jobId: "job-gone" }),
    ]);
    await publisher.flush();
    // Two hours later retention, which runs on its own, removes both.
    clock = 2 * HOUR;
    let refused: ConnectError | undefined;
    while (!refused) {
      try {
        await watchAll(events.url, { fromPosition: 1n });
        await new Promise((resolve) => setTimeout(resolve, 50));
      } catch (error) {
        refused = ConnectError.from(error);
      }
    }
    assert.equal(refused.code, Code.OutOfRange);
    assert.match(
      refused.rawMessage,
      /were removed by retention \(OZ0_EVENTS_RETENTION_HOURS\).*watch from 3, or from 0/,
    );

    publisher.publish(rawEvent("job.created", { jobId: "job-new" }));
    await publisher.flush();
    const kept = await watchAll(events.url, { fromPosition: 0n });
    assert.deepEqual(
      kept.map((e) => [e.jobId, e.position]),
      [["job-new", 3n]],
    );
    await publisher.close();
  });

  void test("closing while retention works through a backlog shuts down cleanly", async () => {
    let clock = 0;
    // In memory (no data folder): close() has nothing slow to wait for, so a prune still running would meet a closed log.
    const events = await startEvents({
      auth: testCredentials.settingsFor("events"),
      port: 0,
      retentionMs: HOUR,
      pruneIntervalMs: 20,
      now: () => clock,
    });
    const publisher = createEventPublisher({
      token: testCredentials.services.orchestrator,
      url: events.url,
      maxBatch: 5_000,
    });
    publisher.publish(
      Array.from({ length: 30_000 }, (_, i) => rawEvent("graph.step_started", { jobId: `job-${i % 7}` })),
    );
    await publisher.flush();
    await publisher.close();
    clock = 2 * HOUR;
    // Once retention has taken its first step (position 1 is refused), close at once.
    for (;;) {
      const refused = await watchAll(events.url, { fromPosition: 1n }).then(
        () => false,
        () => true,
      );
      if (refused) break;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    await events.close();
  });
});
