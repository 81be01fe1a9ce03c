// What a node or a harness says goes into lifecycle events' attributes (an
// exit's signal and error code, a tool call's input), and the events service
// reads at most 16 MiB a message, refusing a larger one by resetting the
// stream: read as an outage, the outbox sent such an event again for ever,
// oldest first, ahead of every other job's (attacker review). Now an event's
// attributes are bounded as it is made, the outbox sends at most 4 MiB a
// call, and an event stored larger than that alone is dropped, named. Real
// events service, real SQLite store.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { startEvents } from "@oz0/events";
import { rawEvent } from "@oz0/events-client";
import { EventsService } from "@oz0/proto/oz0/events/v1/events_pb";
import { bearerInterceptor } from "@oz0/serving";
import { capturingLogger, testCredentials } from "@oz0/serving/testing";
import { LifecycleOutbox, MAX_ATTRIBUTES_JSON_BYTES } from "../src/cluster/lifecycle-outbox.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { eventually } from "./support/eventually.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-outbox-oversized-"));
const cleanup: (() => Promise<void> | void)[] = [];
let events: Awaited<ReturnType<typeof startEvents>>;
let store: SqliteJobStore;
const log = capturingLogger();
let outbox: LifecycleOutbox;

before(async () => {
  events = await startEvents({
    auth: testCredentials.settingsFor("events"),
    port: 0,
    dataDir: path.join(dir, "events"),
  });
  cleanup.push(() => events.close());
  store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
  cleanup.push(() => store.close());
  outbox = new LifecycleOutbox({
    url: events.url,
    token: testCredentials.services.orchestrator,
    store,
    logger: log.logger,
    pollMs: 200,
    lingerMs: 0,
  });
  cleanup.push(() => outbox.close());
});

after(async () => {
  for (const step of cleanup.reverse()) await step();
  rmSync(dir, { recursive: true, force: true });
});

async function delivered(jobId: string): Promise<number> {
  const client = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: events.url, interceptors: [bearerInterceptor(testCredentials.owner)] }),
  );
  let count = 0;
  for await (const r of client.watch({ jobId, untilCaughtUp: true })) if (r.event) count++;
  return count;
}

void test("an event's attributes past the bound keep their small values only, and the event goes", async () => {
  const event = outbox.event("session.ended", {
    jobId: "job-huge-signal",
    status: "failed",
    attributes: { signal: "S".repeat(20 * 1024 * 1024), error_code: "no_result", exit_code: 1 },
  });
  assert.deepEqual(JSON.parse(event.attributesJson), { error_code: "no_result", exit_code: 1 });
  const input = outbox.event("tool.called", {
    jobId: "job-huge-input",
    attributes: {
      tool_name: "write_file",
      input: { path: "notes.md", content: "x".repeat(MAX_ATTRIBUTES_JSON_BYTES) },
    },
  });
  // The path the public event shows is kept; the content, never public, is not.
  assert.deepEqual(JSON.parse(input.attributesJson), { tool_name: "write_file", input: { path: "notes.md" } });
  assert.equal(log.lines.filter((l) => /only their small values are sent/.test(l.msg ?? "")).length, 2);
  await store.putLifecycleEvents([event, input]);
  outbox.committed();
  await eventually(async () => ((await delivered("job-huge-signal")) === 1 ? true : undefined), "the bounded event");
});

void test("an event stored too large to send (before the bound) is dropped, named, and the events after it go", async () => {
  const huge = rawEvent("session.ended", {
    source: "orchestrator",
    jobId: "job-stored-huge",
    attributes: { signal: "S".repeat(20 * 1024 * 1024) },
  });
  await store.putLifecycleEvents([huge]);
  await store.putLifecycleEvents([outbox.event("job.completed", { jobId: "job-after", status: "completed" })]);
  outbox.committed();
  await eventually(async () => ((await delivered("job-after")) === 1 ? true : undefined), "the later job's event");
  assert.equal(await delivered("job-stored-huge"), 0);
  assert.ok(log.lines.some((l) => l.code === "LIFECYCLE_EVENT_TOO_LARGE" && l.id === huge.id));
});

void test("events that together exceed a message go in several calls, none lost", async () => {
  // 300 of 60 KiB of attributes each, under the bound: 18 MiB in one claim of 500, more than the events service
  // reads in a message; five calls.
  const many = Array.from({ length: 300 }, (_, i) =>
    outbox.event("tool.called", {
      jobId: "job-many",
      toolCallId: `call-${i}`,
      attributes: { tool_name: "read_file", note: "n".repeat(60 * 1024) },
    }),
  );
  await store.putLifecycleEvents(many);
  outbox.committed();
  await eventually(async () => ((await delivered("job-many")) === 300 ? true : undefined), "all 300 events");
});
