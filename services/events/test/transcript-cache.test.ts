// A built transcript is kept until its job's next event: asked again, the
// same transcript is answered without building it again; another job's
// events leave it kept; the job's own next event, or retention removing
// some of its events, has it built again.
import assert from "node:assert/strict";
import { test } from "node:test";
import { redactEvent } from "@oz0/events";
import { rawEvent } from "@oz0/events-client";
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { Outbox } from "../src/outbox.js";
import { TranscriptCache } from "../src/transcript-cache.js";

function eventOf(jobId: string, iteration: number): PublicEvent {
  const outcome = redactEvent(rawEvent("graph.step_started", { jobId, attributes: { iteration } }));
  assert.ok(outcome.ok);
  return outcome.event;
}

void test("a transcript is built again only when its job's events changed", async () => {
  let clock = 1_000;
  const outbox = new Outbox({ now: () => clock });
  try {
    const transcripts = new TranscriptCache(outbox);
    await outbox.append([eventOf("job-a", 1), eventOf("job-a", 2)]);
    const first = transcripts.transcript("job-a");
    assert.equal(first.rows.length, 2);
    assert.equal(transcripts.transcript("job-a"), first, "asked again: the kept transcript");

    await outbox.append([eventOf("job-b", 1)]);
    assert.equal(transcripts.transcript("job-a"), first, "another job's event changes nothing of this one");

    clock = 2_000;
    await outbox.append([eventOf("job-a", 3)]);
    const second = transcripts.transcript("job-a");
    assert.notEqual(second, first);
    assert.equal(second.rows.length, 3, "the job's next event is in");

    assert.equal(outbox.prune({ acceptedBefore: 1_500, keepUndelivered: false }), 3);
    assert.equal(transcripts.transcript("job-a").rows.length, 1, "what retention removed is out");
  } finally {
    await outbox.close();
  }
});
