// An event's time is the producer's word, and the stored event is JSON that
// Watch, Transcript and Kafka's consumers parse again: a time JSON cannot
// write (past year 9999, before year 1, nanoseconds outside 0..999,999,999)
// is replaced by the time the event was accepted, never stored as it came.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { rawEvent } from "@oz0/events-client";
import { eventsClient, watchAll } from "./fixtures/events-client.js";
import { startTestEvents } from "./fixtures/test-service.js";

const cleanup: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const close of cleanup) await close();
});

const time = (seconds: bigint, nanos = 0): Timestamp => ({ $typeName: "google.protobuf.Timestamp", seconds, nanos });

void test("a time JSON cannot write is replaced by the time of acceptance; the job's Watch and Transcript still read", async () => {
  const events = await startTestEvents(cleanup);
  const client = eventsClient(events.url);
  const unprintable = [
    time(10n ** 15n),
    time(253_402_300_800n), // 10000-01-01
    time(-62_135_596_801n), // the last second of year 0
    time(1_700_000_000n, -5),
    time(1_700_000_000n, 1_000_000_000),
  ];
  const before = Date.now();
  const raw = unprintable.map((t) => {
    const event = rawEvent("tool.called", { jobId: "job-time", attributes: { tool_name: "read" } });
    event.time = t;
    return event;
  });
  const earliest = rawEvent("tool.called", { jobId: "job-time", attributes: { tool_name: "read" } });
  earliest.time = time(-62_135_596_800n); // 0001-01-01, the earliest JSON writes
  const other = rawEvent("tool.called", { jobId: "job-other", attributes: { tool_name: "read" } });
  const answer = await client.publish({ events: [...raw, earliest, other] });
  assert.equal(answer.accepted, 7);

  const watched = await watchAll(events.url);
  assert.equal(watched.length, 7);
  for (const event of watched.slice(0, unprintable.length)) {
    const at = timestampDate(event.time!).getTime();
    assert.ok(at >= before - 1_000 && at <= Date.now() + 1_000, `an unprintable time became ${at}, not now`);
  }
  assert.equal(timestampDate(watched[5]!.time!).toISOString(), "0001-01-01T00:00:00.000Z");
  const transcript = await client.transcript({ jobId: "job-time" });
  assert.equal(transcript.rows.length, 6);
});
