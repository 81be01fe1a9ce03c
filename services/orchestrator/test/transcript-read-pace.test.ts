// A job that writes events without a pause has its transcript read at most
// once a TRANSCRIPT_READ_INTERVAL_MS: the events service builds each read on
// the thread that takes every Publish. Its watchers still get the newest
// transcript, with every change in it, after the burst.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { create } from "@bufbuild/protobuf";
import { TranscriptResponseSchema, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import type { JobTranscripts } from "../src/jobs/job-transcripts.js";
import { TRANSCRIPT_READ_INTERVAL_MS, TranscriptFollowers } from "../src/jobs/transcript-followers.js";

void test("a burst of changes is read at most once an interval, and its last change is in the last read", async () => {
  let changes = 0;
  let reads = 0;
  const transcripts: JobTranscripts = {
    // Each read holds the changes so far (as omitted_events, a field the test can count with).
    transcript: async (jobId) => {
      reads++;
      return create(TranscriptResponseSchema, { jobId, omittedEvents: changes });
    },
    async *changes(_jobId, signal) {
      yield; // caught up
      // 40 changes, 25 ms apart: a second of events with no pause.
      for (let i = 0; i < 40 && !signal.aborted; i++) {
        await sleep(25);
        changes++;
        yield;
      }
      await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    },
  };
  const followers = new TranscriptFollowers(transcripts);
  const stop = new AbortController();
  const seen: TranscriptResponse[] = [];
  const started = performance.now();
  const watching = (async () => {
    for await (const transcript of followers.watch("job-busy", stop.signal)) seen.push(transcript);
  })();
  // Until the last change is sent (however slow the machine), then what it took counts the reads allowed.
  while (seen.at(-1)?.omittedEvents !== 40 && performance.now() - started < 30_000) await sleep(50);
  const elapsed = performance.now() - started;
  stop.abort();
  await watching;
  assert.equal(seen.at(-1)?.omittedEvents, 40, "the last change is in the last transcript sent");
  // One read at catch-up, then at most one an interval.
  const allowed = Math.floor(elapsed / TRANSCRIPT_READ_INTERVAL_MS) + 2;
  assert.ok(reads <= allowed, `${reads} reads for 40 changes in ${Math.round(elapsed)} ms (at most ${allowed})`);
});
