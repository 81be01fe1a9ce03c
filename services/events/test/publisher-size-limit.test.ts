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

void test("at the default limit, a batch past it is never sent: the service resets the connection rather than refusing it, which reads as an outage", async () => {
  // The default OZ0_MAX_MESSAGE_BYTES (16 MiB). A message past it ends the HTTP/2 session
  // (NGHTTP2_ENHANCE_YOUR_CALM), not ResourceExhausted, so the publisher sent the batch again for ever.
  const events = await startEvents({ auth: testCredentials.settingsFor("events"), port: 0 });
  cleanup.push(() => events.close());
  const lines: { obj: Record<string, unknown>; msg?: string }[] = [];
  const logger: PublisherLogger = {
    warn: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }),
    error: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }),
  };
  const publisher = createEventPublisher({ token: testCredentials.services["llm-proxy"], url: events.url, logger });
  cleanup.push(() => publisher.close());
  // A harness picks the model name an LLM proxy's usage event carries: 20 calls of 1 MiB, then one of 20 MiB.
  const call = (jobId: string, modelBytes: number) =>
    rawEvent("llm.call_completed", { jobId, attributes: { model: "m".repeat(modelBytes), provider: "p" } });
  const sent = Array.from({ length: 20 }, () => call("job-long-model", 1024 * 1024));
  const tooLarge = call("job-long-model", 20 * 1024 * 1024);
  sent.push(tooLarge, call("job-other", 3));
  publisher.publish(sent);
  let guard: NodeJS.Timeout | undefined;
  const flushed = await Promise.race([
    publisher.flush().then(() => true),
    new Promise<false>((resolve) => (guard = setTimeout(() => resolve(false), 120_000))),
  ]);
  clearTimeout(guard);
  assert.ok(flushed, `the publisher never got its events accepted: ${JSON.stringify(lines.slice(0, 3))}`);

  const stored = [
    ...(await watchAll(events.url, { jobId: "job-long-model" })),
    ...(await watchAll(events.url, { jobId: "job-other" })),
  ];
  assert.deepEqual(
    stored.map((e) => e.id),
    sent.filter((e) => e !== tooLarge).map((e) => e.id),
    "every other event stored, in the order published",
  );
  const dropped = lines.filter((l) => l.obj.code === "EVENTS_EVENT_TOO_LARGE");
  assert.deepEqual(
    dropped.map((l) => l.obj.id),
    [tooLarge.id],
  );
});
