// A stored lifecycle event that can never be read again (a token count past
// its uint32 field, written by a producer before rawEvent saturated counts)
// does not hold back the events claimed with it. Before, the claim failed as
// a whole and was retried forever, and every other job's events in it (and
// those claimed after, once the claim ran out) never reached the events
// service.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { rawEvent } from "@oz0/events-client";
import { RawEventSchema } from "@oz0/proto/oz0/events/v1/events_pb";
import type { Logger } from "@oz0/serving";
import { LifecycleOutbox } from "../src/cluster/lifecycle-outbox.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";
import { startEventsWithReader, watchedEvents } from "./support/events-with-reader.js";

void test("an unreadable stored lifecycle event is dropped and named; the events claimed with it reach the events service", async () => {
  const { events, orchestrator, reader } = await startEventsWithReader();
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-unreadable-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  const logged: { level: string; fields: Record<string, unknown> }[] = [];
  const record =
    (level: string) =>
    (fields: Record<string, unknown>): void =>
      void logged.push({ level, fields });
  const logger = {
    error: record("error"),
    warn: record("warn"),
    info: record("info"),
    debug: record("debug"),
  } as unknown as Logger;
  const outbox = new LifecycleOutbox({ url: events.url, token: orchestrator, store, logger, pollMs: 50 });
  try {
    await store.putLifecycleEvents([
      rawEvent("job.created", { jobId: "victim", attributes: { harness: "claude" } }),
      create(RawEventSchema, {
        id: "e-bad",
        type: "harness.operation_completed",
        jobId: "attacker",
        tokens: { inputTokens: 2 ** 32 },
      }),
      rawEvent("job.completed", { jobId: "victim" }),
    ]);
    const shipped = await eventually(async () => {
      const types = (await watchedEvents(events.url, reader, "victim")).map((e) => e.type);
      return types.length === 2 ? types : undefined;
    });
    assert.deepEqual(shipped, ["job.created", "job.completed"]);
    const unreadable = logged.find((l) => l.fields.code === "LIFECYCLE_EVENT_UNREADABLE");
    assert.ok(unreadable, JSON.stringify(logged));
    assert.equal(unreadable.level, "error");
    assert.match(String(unreadable.fields.reason), /input_tokens.*out of range/);
    assert.deepEqual(await store.claimLifecycleEvents({ limit: 10, claimMs: 1 }), [], "nothing left in the outbox");
  } finally {
    await outbox.close();
    await store.close();
    await events.close();
    rmSync(home, { recursive: true, force: true });
  }
});
