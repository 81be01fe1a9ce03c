// Events published on their own (a harness operation's start, steps and end;
// graph steps) reach the events service in the order they were published.
// Each was stored by a put of its own, all at once: on PostgreSQL each put
// ran on a connection of its own and took its sequence number as it happened
// to run (out of call order for 124 of 300 events published six at a time),
// so a later step was shipped, numbered and shown before an earlier one. Here
// the first put is slow, as a put on a busy connection is.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { createLogger } from "@oz0/serving";
import { LifecycleOutbox } from "../src/cluster/lifecycle-outbox.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";
import { startEventsWithReader, watchedEvents } from "./support/events-with-reader.js";

void test("events published one after another are stored, shipped and numbered in that order", async () => {
  const { events, orchestrator, reader } = await startEventsWithReader();
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-order-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  // The first put waits, as one on a busy connection does; the others find the store at once.
  let puts = 0;
  const slowFirstPut = Object.create(store) as SqliteJobStore;
  slowFirstPut.putLifecycleEvents = async (stored: RawEvent[]) => {
    if (puts++ === 0) await new Promise((resolve) => setTimeout(resolve, 300));
    return store.putLifecycleEvents(stored);
  };
  const outbox = new LifecycleOutbox({
    url: events.url,
    token: orchestrator,
    store: slowFirstPut,
    logger: createLogger({ name: "lifecycle-outbox-order" }),
    pollMs: 50,
  });
  try {
    const base = { jobId: "job-o", operationInvocationId: "inv-1" };
    outbox.publish("harness.operation_started", { ...base, attributes: { operation_key: "extract" } });
    for (let step = 1; step <= 4; step++)
      outbox.publish("harness.operation_step", { ...base, attributes: { step_index: step, step_kind: "tool" } });
    outbox.publish("harness.operation_completed", { ...base, attributes: { operation_key: "extract" } });

    const shipped = await eventually(async () => {
      const seen = (await watchedEvents(events.url, reader, "job-o")).map((e) =>
        `${e.type} ${String(e.attributes?.step_index ?? "")}`.trim(),
      );
      return seen.length === 6 ? seen : undefined;
    }, "the six events on the events service");
    assert.deepEqual(shipped, [
      "harness.operation_started",
      "harness.operation_step 1",
      "harness.operation_step 2",
      "harness.operation_step 3",
      "harness.operation_step 4",
      "harness.operation_completed",
    ]);
  } finally {
    await outbox.close();
    await store.close();
    await events.close();
    rmSync(home, { recursive: true, force: true });
  }
});
