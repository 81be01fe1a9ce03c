// The outbox's poll ships what it finds at once. It looks every second for
// events no commit of this process nudged for (another replica's, a dead
// shipper's, a batch not accepted yet); it went through the linger meant for
// commits that arrive together, so each poll woke the process twice, a second
// apart while idle (issue 24), and what it found waited out the linger too.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { rawEvent } from "@oz0/events-client";
import type { Logger } from "@oz0/serving";
import { LifecycleOutbox } from "../src/cluster/lifecycle-outbox.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";
import { startEventsWithReader, watchedEvents } from "./support/events-with-reader.js";

const quiet = { error: () => {}, warn: () => {}, info: () => {}, debug: () => {} } as unknown as Logger;

void test("events stored without a nudge (as another replica or a dead shipper leaves them) are shipped by the poll without the commits' linger", async () => {
  const { events, orchestrator, reader } = await startEventsWithReader();
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-poll-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  // A linger far longer than the test waits: only a poll that does not linger ships in time.
  const outbox = new LifecycleOutbox({
    url: events.url,
    token: orchestrator,
    store,
    logger: quiet,
    pollMs: 50,
    lingerMs: 10 * 60_000,
  });
  try {
    await store.putLifecycleEvents([
      rawEvent("job.created", { jobId: "left" }),
      rawEvent("job.completed", { jobId: "left" }),
    ]);
    const shipped = await eventually(async () => {
      const types = (await watchedEvents(events.url, reader, "left")).map((e) => e.type);
      return types.length === 2 ? types : undefined;
    }, "the polled events on the events service");
    assert.deepEqual(shipped, ["job.created", "job.completed"]);
    assert.deepEqual(await store.claimLifecycleEvents({ limit: 10, claimMs: 1 }), [], "nothing left in the outbox");
  } finally {
    await outbox.close();
    await store.close();
    await events.close();
    rmSync(home, { recursive: true, force: true });
  }
});
