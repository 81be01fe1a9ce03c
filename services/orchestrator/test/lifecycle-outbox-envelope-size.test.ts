// A harness names its tool calls, and a tool call's id is a lifecycle
// event's envelope (tool_call_id), unbounded but by the harness's line
// (1 MiB). The outbox sized its Publish calls by the events' attributes
// only: thirty such calls went as one message of 30 MiB, past the events
// service's limit, which ends the HTTP/2 session; read as an outage, the
// claim was sent again for ever, and another job's events behind it never
// arrived.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { createLogger } from "@oz0/serving";
import { LifecycleOutbox } from "../src/cluster/lifecycle-outbox.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";
import { startEventsWithReader, watchedEvents } from "./support/events-with-reader.js";

void test("events whose envelope ids are long are shipped in calls the events service takes; the events after them arrive", async () => {
  // At its default message limit (16 MiB).
  const { events, orchestrator, reader } = await startEventsWithReader();
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-envelope-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  const outbox = new LifecycleOutbox({
    url: events.url,
    token: orchestrator,
    store,
    logger: createLogger({ name: "lifecycle-outbox-envelope-size" }),
    pollMs: 100,
  });
  try {
    const longId = "c".repeat(1024 * 1024 - 16);
    await store.putLifecycleEvents([
      ...Array.from({ length: 30 }, (_, i) =>
        outbox.event("tool.called", {
          jobId: "job-long-ids",
          toolCallId: `${longId}${i}`,
          attributes: { tool_name: "read" },
        }),
      ),
      outbox.event("job.created", { jobId: "job-after" }),
    ]);
    outbox.committed();
    const count = async (jobId: string): Promise<number> => (await watchedEvents(events.url, reader, jobId)).length;
    await eventually(
      async () => ((await count("job-after")) === 1 ? true : undefined),
      "job-after's event on the events service",
      60_000,
    );
    assert.equal(await count("job-long-ids"), 30, "the long ids' events arrived too (their ids cleared)");
  } finally {
    await outbox.close({ timeoutMs: 500 });
    await store.close();
    await events.close();
    rmSync(home, { recursive: true, force: true });
  }
});
