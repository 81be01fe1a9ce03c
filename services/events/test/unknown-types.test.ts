// A type outside @oz0/events-client's list can still reach Publish: from a
// producer of another version (a type added after this service was built, or
// removed since) or from another client. The documented rule (README,
// "Unknown types"): the event is accepted with its envelope only, the
// response counts it in `reduced`, the service names each such type once in
// its log, and the producers' publisher says so in its own.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  LIFECYCLE_EVENTS,
  LIFECYCLE_TYPES,
  createEventPublisher,
  rawEvent,
  type PublisherLogger,
} from "@oz0/events-client";
import { testCredentials } from "@oz0/serving/testing";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { foreignEvent } from "./fixtures/foreign-event.js";
import { startLoggedEvents } from "./fixtures/test-service.js";

const SECRET = "s3cr3t-attribute";
const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const close of cleanup) await close();
});
const service = () => startLoggedEvents(cleanup);

void describe("an unknown type at Publish", () => {
  void test("is accepted with its envelope only, counted in reduced, and named once per type in the service's log", async () => {
    const { events, log } = await service();
    const client = eventsClient(events.url);
    const first = await client.publish({
      events: [
        rawEvent("tool.called", { jobId: "job-u", attributes: { tool_name: "read" } }),
        foreignEvent("custom.thing_happened", {
          jobId: "job-u",
          status: "completed",
          tokens: { inputTokens: 5 },
          attributes: { tool_name: "read", secret: SECRET },
        }),
      ],
    });
    assert.deepEqual([first.accepted, first.reduced, first.dropped], [2, 1, 0]);
    const second = await client.publish({
      events: [
        foreignEvent("custom.thing_happened", { jobId: "job-u" }),
        foreignEvent("other.thing", { jobId: "job-u" }),
      ],
    });
    assert.deepEqual([second.accepted, second.reduced], [2, 2]);

    const watched = await watchAll(events.url, { jobId: "job-u" });
    assert.deepEqual(
      watched.map((e) => [e.type, e.reduced]),
      [
        ["tool.called", false],
        ["custom.thing_happened", true],
        ["custom.thing_happened", true],
        ["other.thing", true],
      ],
    );
    const reduced = watched[1]!;
    assert.deepEqual(reduced.attributes, {});
    assert.equal(reduced.status, "completed");
    assert.equal(reduced.tokens?.inputTokens, 5);

    const warnings = log.filter((line) => line.code === "EVENTS_TYPE_UNKNOWN");
    assert.deepEqual(
      warnings.map((w) => w.type),
      ["custom.thing_happened", "other.thing"],
    );
    assert.deepEqual(warnings[0]!.known, [...LIFECYCLE_TYPES]);
    assert.ok(!JSON.stringify(log).includes(SECRET), "the log holds no attribute of the event");
  });

  void test("a known type is never counted or logged as unknown", async () => {
    const { events, log } = await service();
    // Each type from a service that sends it: another's credential may not (publish-senders.test.ts).
    let accepted = 0;
    let reduced = 0;
    for (const type of LIFECYCLE_TYPES) {
      const response = await eventsClient(events.url, LIFECYCLE_EVENTS[type].sentBy[0]).publish({
        events: [rawEvent(type, { jobId: "job-k" })],
      });
      accepted += response.accepted;
      reduced += response.reduced;
    }
    assert.deepEqual([accepted, reduced], [LIFECYCLE_TYPES.length, 0]);
    assert.ok((await watchAll(events.url, { jobId: "job-k" })).every((e) => !e.reduced));
    assert.deepEqual(
      log.filter((line) => line.code === "EVENTS_TYPE_UNKNOWN"),
      [],
    );
  });

  void test("the producers' publisher says the service kept only the envelope", async () => {
    const { events } = await service();
    const lines: { obj: object; msg?: string }[] = [];
    const logger: PublisherLogger = {
      warn: (obj, msg) => lines.push({ obj, msg }),
      error: (obj, msg) => lines.push({ obj, msg }),
    };
    const publisher = createEventPublisher({ token: testCredentials.services.orchestrator, url: events.url, logger });
    publisher.publish([rawEvent("job.created", { jobId: "job-p" }), foreignEvent("job.started", { jobId: "job-p" })]);
    await publisher.close();
    assert.deepEqual(
      lines.map((l) => l.obj),
      [{ code: "EVENTS_TYPE_UNKNOWN", reduced: 1, count: 2 }],
    );
  });
});
