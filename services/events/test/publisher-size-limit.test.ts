// A batch larger than the events service takes in one message
// (OZ0_MAX_MESSAGE_BYTES) would be refused ResourceExhausted every time it
// went again, and every event queued behind it with it: the publisher sends
// it in halves, in order, and drops (and logs) only an event that is larger
// than the limit on its own.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { startEvents } from "@oz0/events";
import { createEventPublisher, rawEvent, type PublisherLogger } from "@oz0/events-client";
import { testCredentials } from "@oz0/serving/testing";
import { watchAll } from "./fixtures/events-client.js";

const LIMIT = 16 * 1024;

const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const step of cleanup.reverse()) await step();
});

void test("the publisher splits a batch past the service's message limit, and drops only an event past it alone", async () => {
  const events = await startEvents({ auth: testCredentials.settingsFor("events"), port: 0, maxMessageBytes: LIMIT });
  cleanup.push(() => events.close());
  const lines: { obj: Record<string, unknown>; msg?: string }[] = [];
  const logger: PublisherLogger = {
    warn: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }),
    error: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }),
  };
  const publisher = createEventPublisher({ token: testCredentials.services.orchestrator, url: events.url, logger });
  cleanup.push(() => publisher.close());
  const call = (i: number, inputBytes: number) =>
    rawEvent("tool.called", {
      jobId: "job-sized",
      toolCallId: `call-${i}`,
      attributes: { tool_name: "Write", input: "x".repeat(inputBytes) },
    });
  // 40 events of 1 KiB: one batch of about 40 KiB, over the limit; then one over it alone; then 10 more.
  const sent = [...Array.from({ length: 40 }, (_, i) => call(i, 1024)), call(40, 2 * LIMIT)];
  sent.push(...Array.from({ length: 10 }, (_, i) => call(41 + i, 1024)));
  publisher.publish(sent);
  await publisher.flush();

  const stored = await watchAll(events.url, { jobId: "job-sized" });
  const tooLarge = sent[40]!;
  assert.deepEqual(
    stored.map((e) => e.id),
    sent.filter((e) => e !== tooLarge).map((e) => e.id),
    "every other event stored, in the order published",
  );
  const dropped = lines.filter((l) => l.obj.code === "EVENTS_BATCH_REJECTED");
  assert.equal(dropped.length, 1);
  assert.deepEqual(dropped[0]!.obj.ids, [tooLarge.id]);
  assert.match(String(dropped[0]!.obj.reason), /OZ0_MAX_MESSAGE_BYTES/);
});
