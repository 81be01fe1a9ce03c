// Who may say what: an event's source is the service whose credential
// published it, and a known type is taken only from a service that sends
// it (@oz0/events-client's LIFECYCLE_EVENTS). Every sandbox node holds the
// sandbox's credential beside agent code, so Publish refuses it outright:
// with it a node could say, for any job, that its session started or ended
// (what a node reports of its sessions, the orchestrator publishes). The LLM
// proxy's credential publishes its own type only: not, in the orchestrator's
// name, that an approval was answered or a job completed, which the
// transcript and the console would show.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
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
  void test("the sandbox's credential publishes nothing, not even a session's start or end", async () => {
    const { events } = await service();
    const asSandbox = eventsClient(events.url, "sandbox");
    for (const publish of [
      () => asSandbox.publish({ events: [rawEvent("session.ended", { jobId: "job-victim", status: "completed" })] }),
      async () => {
        for await (const answer of asSandbox.publishStream(
          (async function* () {
            yield { events: [rawEvent("session.started", { jobId: "job-victim", status: "running" })] };
          })(),
        ))
          void answer;
      },
    ])
      await assert.rejects(publish(), (error: unknown) => {
        // Not even known as a caller: the events service holds no digest of it (ACCEPTED_PEERS).
        assert.equal(ConnectError.from(error).code, Code.Unauthenticated);
        return true;
      });
    assert.deepEqual(await watchAll(events.url, { jobId: "job-victim" }), []);
  });

  void test("the LLM proxy's credential cannot publish the orchestrator's events, and its events are its own whatever they say", async () => {
    const { events, log } = await service();
    const asProxy = eventsClient(events.url, "llm-proxy");
    const forged = await asProxy.publish({
      events: [
        rawEvent("approval.answered", {
          jobId: "job-victim",
          source: "orchestrator",
          status: "approved",
          attributes: { decision: "approved", answered_by: "alice" },
        }),
        rawEvent("job.completed", { jobId: "job-victim", source: "orchestrator", status: "completed" }),
        rawEvent("session.ended", { jobId: "job-victim", source: "orchestrator", status: "completed" }),
        rawEvent("llm.call_completed", { jobId: "job-victim", source: "orchestrator", attributes: { cost_usd: 1 } }),
        foreignEvent("custom.thing_happened", { jobId: "job-victim", source: "orchestrator" }),
      ],
    });
    assert.deepEqual([forged.accepted, forged.dropped, forged.reduced], [2, 3, 1]);
    // A second refused pair of the same sender and type is not logged again.
    const again = await asProxy.publish({ events: [rawEvent("job.completed", { jobId: "job-victim" })] });
    assert.deepEqual([again.accepted, again.dropped], [0, 1]);

    const stored = await watchAll(events.url, { jobId: "job-victim" });
    assert.deepEqual(
      stored.map((e) => [e.type, e.source]),
      [
        ["llm.call_completed", "llm-proxy"],
        ["custom.thing_happened", "llm-proxy"],
      ],
    );
    const refusals = log.filter((line) => line.code === "EVENTS_SENDER_REFUSED");
    assert.deepEqual(
      refusals.map((line) => [line.sender, line.type]),
      [
        ["llm-proxy", "approval.answered"],
        ["llm-proxy", "job.completed"],
        ["llm-proxy", "session.ended"],
      ],
    );
    assert.match(String(refusals[0]!.msg), /only orchestrator may send them/);
  });

  void test("each producer publishes its own types, under its own name", async () => {
    const { events } = await service();
    const sent = [
      await eventsClient(events.url, "orchestrator").publish({
        events: [
          rawEvent("session.started", { jobId: "job-own", source: "llm-proxy", attributes: { harness: "fake" } }),
          rawEvent("job.completed", { jobId: "job-own", source: "llm-proxy", status: "completed" }),
        ],
      }),
      await eventsClient(events.url, "llm-proxy").publish({
        events: [rawEvent("llm.call_completed", { jobId: "job-own", source: "llm-proxy" })],
      }),
    ];
    assert.deepEqual(
      sent.map((answer) => [answer.accepted, answer.dropped]),
      [
        [2, 0],
        [1, 0],
      ],
    );
    const stored = await watchAll(events.url, { jobId: "job-own" });
    assert.deepEqual(
      stored.map((e) => [e.type, e.source]),
      [
        ["session.started", "orchestrator"],
        ["job.completed", "orchestrator"],
        ["llm.call_completed", "llm-proxy"],
      ],
    );
  });
});
