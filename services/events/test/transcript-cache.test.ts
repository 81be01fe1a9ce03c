// A built transcript is kept until its job's next event: asked again, the
// same transcript is answered without building it again; another job's
// events leave it kept; the job's own next event, or retention removing
// some of its events, has it built again. A transcript holds its job's newest
// events only, counting the rest.
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

void test("a transcript is built from its job's newest events and counts the rest; kept transcripts hold a bounded number of events", async () => {
  // A job's harness can write any number of tool calls: building from all of them stalled every Publish.
  const outbox = new Outbox({});
  try {
    const transcripts = new TranscriptCache(outbox, { maxEvents: 50 });
    await outbox.append(Array.from({ length: 120 }, (_, i) => eventOf("job-big", i)));
    const big = transcripts.transcript("job-big");
    assert.equal(big.rows.length, 50);
    assert.equal(big.omittedEvents, 70);
    const iterations = big.rows.map((row) =>
      row.row.case === "event" ? Number(row.row.value.attributes?.iteration) : -1,
    );
    assert.deepEqual(
      iterations,
      Array.from({ length: 50 }, (_, i) => 70 + i),
      "the newest 50, oldest first",
    );

    await outbox.append([eventOf("job-small", 1)]);
    const small = transcripts.transcript("job-small");
    assert.equal(small.omittedEvents, 0);
    assert.equal(small.rows.length, 1);
  } finally {
    await outbox.close();
  }
});
