// The outbox commits the Publish calls of the moment together (one
// transaction, one fsync), and still answers each call
// only once its events are durable: concurrent producers each get all their
// events stored once, in their order; and every event a producer was told
// was accepted is still there after the service is killed mid-load (a second
// service is refused the data directory meanwhile, and the next start gets it).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { redactEvent, startEvents } from "@oz0/events";
import { createEventPublisher, rawEvent, type EventPublisher } from "@oz0/events-client";
import { testCredentials } from "@oz0/serving/testing";
import { Outbox } from "../src/outbox.js";
import { watchAll } from "./fixtures/events-client.js";

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-events-group-"));
  dirs.push(dir);
  return dir;
}

const quiet = { warn: () => undefined, error: () => undefined };
const publisherFor = (url: string): EventPublisher =>
  createEventPublisher({ token: testCredentials.services.orchestrator, url, logger: quiet, lingerMs: 0 });

/** Event `n` of producer `p`: its id says who sent it and in which order. */
const eventOf = (p: number, n: number) =>
  rawEvent("graph.step_started", {
    id: `p${p}-n${n}`,
    jobId: `job-${p}`,
    source: "orchestrator",
    attributes: { iteration: n },
  });

/** `[producer, n]` from an event id made by eventOf. */
function parse(id: string): [number, number] {
  const match = /^p(\d+)-n(\d+)$/.exec(id);
  assert.ok(match, `an event the test did not send: ${id}`);
  return [Number(match[1]), Number(match[2])];
}

void describe("group commit of the outbox", () => {
  void test("appends of the same moment are one commit: they share one acceptance time, taken once", async () => {
    // Each reading of the clock moves it, so each commit has a time of its own.
    let clock = 0;
    const outbox = new Outbox({ dataDir: tempDir(), now: () => ++clock });
    try {
      const one = (id: string) => {
        const outcome = redactEvent(rawEvent("graph.step_started", { id, jobId: "job-g" }));
        assert.ok(outcome.ok);
        return [outcome.event];
      };
      const together = await Promise.all([outbox.append(one("a")), outbox.append(one("b")), outbox.append(one("c"))]);
      assert.deepEqual(
        together.map((r) => r.appended.map((e) => e.position)),
        [[1n], [2n], [3n]],
        "answered each with its own events, in order",
      );
      await outbox.append(one("d"));
      // Accepted before 2: exactly the first commit's events.
      assert.equal(
        outbox.prune({ acceptedBefore: 2, keepUndelivered: false }),
        3,
        "the three appends were committed together",
      );
      assert.deepEqual(
        outbox.read({ fromPosition: 0n, limit: 10 }).map((e) => e.id),
        ["d"],
      );
    } finally {
      await outbox.close();
    }
  });

  void test("rows go in a hundred at a time, and a chunk holding a stored id or one twice stores each new event once", async () => {
    const outbox = new Outbox({ dataDir: tempDir() });
    try {
      const batch = (ids: string[]) =>
        ids.map((id) => {
          const outcome = redactEvent(rawEvent("graph.step_started", { id, jobId: `job-${id.length % 3}` }));
          assert.ok(outcome.ok);
          return outcome.event;
        });
      const ids = (from: number, count: number) => Array.from({ length: count }, (_, i) => `e${from + i}`);
      // 250 new events: two whole chunks and 50 one at a time.
      const first = await outbox.append(batch(ids(0, 250)));
      assert.deepEqual([first.appended.length, first.duplicates, first.appended.at(-1)?.position], [250, 0, 250n]);
      // A chunk with two stored ids among new ones, one with an id twice, one all stored, one all new.
      const mixed = [...ids(250, 40), "e7", ...ids(290, 58), "e249", ...ids(348, 50), "e348", ...ids(398, 49)];
      mixed.push(...ids(0, 100), ...ids(447, 100));
      const second = await outbox.append(batch(mixed));
      assert.equal(second.duplicates, 103);
      assert.deepEqual(
        second.appended.map((e) => e.id),
        ids(250, 297),
        "each new event once, in the order given",
      );
      const positions = second.appended.map((e) => e.position);
      assert.ok(
        positions.every((p, i) => p > (i === 0 ? 250n : positions[i - 1]!)),
        "positions grow in the order given (an ignored row may leave one unused, as SQLite's AUTOINCREMENT does)",
      );
      // The chunk of 100 new events went in whole: one position after another.
      assert.deepEqual(
        positions.slice(-100),
        positions.slice(-100).map((_, i) => positions.at(-100)! + BigInt(i)),
      );
      const stored = outbox.read({ fromPosition: 0n, limit: 1_000 });
      assert.deepEqual(
        stored.map((e) => [e.id, e.position]),
        [...first.appended, ...second.appended].map((e) => [e.id, e.position]),
        "the log holds every event once, at the position it was given",
      );
    } finally {
      await outbox.close();
    }
  });

  void test("concurrent producers each get every event stored once, in their own order", async () => {
    const events = await startEvents({ auth: testCredentials.settingsFor("events"), dataDir: tempDir() });
    after(() => events.close());
    const producers = 8;
    const batches = 20;
    const perBatch = 25;
    await Promise.all(
      Array.from({ length: producers }, async (_, p) => {
        const publisher = publisherFor(events.url);
        for (let b = 0; b < batches; b++) {
          publisher.publish(Array.from({ length: perBatch }, (_, i) => eventOf(p, b * perBatch + i)));
          await publisher.flush();
        }
        await publisher.close();
      }),
    );
    const stored = await watchAll(events.url);
    assert.equal(stored.length, producers * batches * perBatch);
    assert.equal(new Set(stored.map((e) => e.id)).size, stored.length, "no event stored twice");
    assert.deepEqual(
      stored.map((e) => e.position),
      stored.map((_, i) => BigInt(i + 1)),
      "positions are given out one after another",
    );
    const next = new Array<number>(producers).fill(0);
    for (const event of stored) {
      const [p, n] = parse(event.id);
      assert.equal(n, next[p], `producer ${p}'s events are stored in the order it sent them`);
      next[p]!++;
    }
  });

  void test("every event a producer was told is accepted survives the service being killed mid-load", async () => {
    const dataDir = tempDir();
    const main = createRequire(import.meta.url)
      .resolve("@oz0/events")
      .replace(/index\.js$/, "main.js");
    const child = spawn(process.execPath, [main], {
      env: {
        ...process.env,
        ...testCredentials.envFor("events"),
        OZ0_PORT: "0",
        OZ0_EVENTS_DATA: dataDir,
        KAFKA_BROKERS: "",
        OZ0_LOG_LEVEL: "info",
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    after(() => {
      child.kill("SIGKILL");
    });
    let output = "";
    const url = await new Promise<string>((resolve, reject) => {
      child.stderr.on("data", (chunk: Buffer) => {
        output += chunk.toString();
        const match = /"url":"(http:\/\/[^"]+)"/.exec(output);
        if (match) resolve(match[1]!);
      });
      child.once("exit", (code) => reject(new Error(`the events service exited with ${code}:\n${output}`)));
    });
    // A second service on the log while this one runs would number events from a head it no longer has: refused.
    await assert.rejects(
      startEvents({ auth: testCredentials.settingsFor("events"), dataDir }),
      new RegExp(`in use by another events process \\(pid ${child.pid}\\); stop it first`),
    );

    // Producers publish batch after batch; a batch counts as accepted once flush() resolved.
    // Large batches from several producers make long group commits, so the
    // kill lands while some are in flight: a service that answered before
    // its commit was durable would lose the events it had just answered for.
    const producers = 4;
    const perBatch = 500;
    const accepted: string[] = [];
    let killed = false;
    const publishers = Array.from({ length: producers }, () => publisherFor(url));
    const kill = async (): Promise<void> => {
      killed = true;
      child.kill("SIGKILL");
      await exited;
    };
    const running = publishers.map(async (publisher, p) => {
      for (let b = 0; !killed; b++) {
        const batch = Array.from({ length: perBatch }, (_, i) => eventOf(p, b * perBatch + i));
        publisher.publish(batch);
        await publisher.flush();
        if (killed) return;
        accepted.push(...batch.map((e) => e.id));
        // Killed while producers are still sending, and batches are in flight.
        if (accepted.length >= 4_000 && !killed) await kill();
      }
    });
    // Once killed, a publisher's flush never resolves: it retries until closed.
    while (!killed) await new Promise((resolve) => setTimeout(resolve, 20));
    for (const publisher of publishers) await publisher.close({ timeoutMs: 0 });
    await Promise.all(running);

    const events = await startEvents({ auth: testCredentials.settingsFor("events"), dataDir });
    after(() => events.close());
    const stored = await watchAll(events.url);
    const ids = new Set(stored.map((e) => e.id));
    assert.equal(ids.size, stored.length, "no event stored twice");
    const lost = accepted.filter((id) => !ids.has(id));
    assert.deepEqual(lost, [], "every accepted event is in the log after the crash");
    // What was stored of each producer is a prefix of what it sent, in order.
    const next = new Array<number>(producers).fill(0);
    for (const event of stored) {
      const [p, n] = parse(event.id);
      assert.equal(n, next[p], `producer ${p}'s events are stored in the order it sent them`);
      next[p]!++;
    }
  });
});
