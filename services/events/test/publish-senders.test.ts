// Who may say what: an event's source is the service whose credential
// published it, and a known type is taken only from a service that sends
// it (@oz0/events-client's LIFECYCLE_EVENTS). Every sandbox node holds the
// sandbox's credential; with it a node could otherwise publish, for any job,
// that an approval was answered or the job completed, in the orchestrator's
// name, and the transcript and the console would show it.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { rawEvent } from "@oz0/events-client";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { foreignEvent } from "./fixtures/foreign-event.js";
import { startLoggedEvents } from "./fixtures/test-service.js";

const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const close of cleanup) await close();
});
const service = () => startLoggedEvents(cleanup);

void describe("a published event's sender", () => {
  void test("the sandbox's credential cannot publish the orchestrator's events, and its events are the sandbox's whatever they say", async () => {
    const { events, log } = await service();
    const asSandbox = eventsClient(events.url, "sandbox");
    const forged = await asSandbox.publish({
      events: [
        rawEvent("approval.answered", {
          jobId: "job-victim",
          source: "orchestrator",
          status: "approved",
          attributes: { decision: "approved", answered_by: "alice" },
        }),
        rawEvent("job.completed", { jobId: "job-victim", source: "orchestrator", status: "completed" }),
        rawEvent("llm.call_completed", { jobId: "job-victim", source: "llm-proxy", attributes: { cost_usd: 9999 } }),
        rawEvent("session.ended", { jobId: "job-victim", source: "orchestrator", status: "completed" }),
        foreignEvent("custom.thing_happened", { jobId: "job-victim", source: "orchestrator" }),
      ],
    });
    assert.deepEqual([forged.accepted, forged.dropped, forged.reduced], [2, 3, 1]);
    // A second refused pair of the same sender and type is not logged again.
    const again = await asSandbox.publish({ events: [rawEvent("job.completed", { jobId: "job-victim" })] });
    assert.deepEqual([again.accepted, again.dropped], [0, 1]);

    const stored = await watchAll(events.url, { jobId: "job-victim" });
    assert.deepEqual(
      stored.map((e) => [e.type, e.source]),
      [
        ["session.ended", "sandbox"],
        ["custom.thing_happened", "sandbox"],
      ],
    );
    const refusals = log.filter((line) => line.code === "EVENTS_SENDER_REFUSED");
    assert.deepEqual(
      refusals.map((line) => [line.sender, line.type]),
      [
        ["sandbox", "approval.answered"],
        ["sandbox", "job.completed"],
        ["sandbox", "llm.call_completed"],
      ],
    );
    assert.match(String(refusals[0]!.msg), /only orchestrator may send them/);
  });

  void test("each producer publishes its own types, under its own name", async () => {
    const { events } = await service();
    const sent = [
      await eventsClient(events.url, "orchestrator").publish({
        events: [rawEvent("job.completed", { jobId: "job-own", source: "sandbox", status: "completed" })],
      }),
      await eventsClient(events.url, "sandbox").publish({
        events: [rawEvent("session.started", { jobId: "job-own", attributes: { harness: "fake" } })],
      }),
      await eventsClient(events.url, "llm-proxy").publish({
        events: [rawEvent("llm.call_completed", { jobId: "job-own", source: "llm-proxy" })],
      }),
    ];
    assert.deepEqual(
      sent.map((answer) => [answer.accepted, answer.dropped]),
      [
        [1, 0],
        [1, 0],
        [1, 0],
      ],
    );
    const stored = await watchAll(events.url, { jobId: "job-own" });
    assert.deepEqual(
      stored.map((e) => [e.type, e.source]),
      [
        ["job.completed", "orchestrator"],
        ["session.started", "sandbox"],
        ["llm.call_completed", "llm-proxy"],
      ],
    );
  });
});
