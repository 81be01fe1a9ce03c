// WatchJobTranscript's follower, with the events service replaced by a fake whose
// changes and transcript reads the test drives step by step: the transcript is
// sent once caught up, a burst of events that arrives while a read is in
// flight costs one more read (not one each), a transcript equal to the last
// one sent is not sent again, and the events service's failure ends the
// stream with its error; and the streams on one job share one follower.
// (test/transcript-watchers.test.ts and the console tests run it against the
// real stack.)
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { TranscriptResponseSchema, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import type { JobTranscripts } from "../src/jobs/job-transcripts.js";
import { TranscriptFollowers } from "../src/jobs/transcript-followers.js";
import { eventually } from "./support/eventually.js";

/** One stream on the job, through the followers the streams of a replica share. */
function watchJobTranscript(transcripts: JobTranscripts, jobId: string, context: { signal: AbortSignal }) {
  return new TranscriptFollowers(transcripts).watch(jobId, context.signal);
}

/** A fake events service: `change()` is one accepted event, `answer()` ends the oldest transcript read. */
function fakeTranscripts(jobId: string) {
  const pendingReads: ((t: TranscriptResponse) => void)[] = [];
  let reads = 0;
  let queued = 0;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  const readAsked: (() => void)[] = [];
  const idle: (() => void)[] = [];
  let waiting = false;
  const transcripts: JobTranscripts = {
    transcript(id) {
      assert.equal(id, jobId);
      reads++;
      readAsked.shift()?.();
      return new Promise((resolve) => pendingReads.push(resolve));
    },
    async *changes(id, signal) {
      assert.equal(id, jobId);
      while (!signal.aborted) {
        if (failure) throw failure;
        if (queued > 0) {
          queued--;
          yield;
          continue;
        }
        waiting = true;
        for (const resolve of idle.splice(0)) resolve();
        await new Promise<void>((resolve) => {
          wake = resolve;
          signal.addEventListener("abort", () => resolve(), { once: true });
        });
        waiting = false;
      }
    },
  };
  return {
    transcripts,
    get reads() {
      return reads;
    },
    change(n = 1) {
      queued += n;
      waiting = false;
      wake?.();
    },
    fail(error: Error) {
      failure = error;
      wake?.();
    },
    /** Resolves once the handler has taken every change so far. */
    drained(): Promise<void> {
      return waiting ? Promise.resolve() : new Promise((resolve) => idle.push(resolve));
    },
    /** Resolves when the handler asks for a transcript (at once if it already has and no answer was given). */
    nextRead(): Promise<void> {
      if (pendingReads.length > 0) return Promise.resolve();
      return new Promise((resolve) => readAsked.push(resolve));
    },
    answer(transcript: TranscriptResponse) {
      const resolve = pendingReads.shift();
      assert.ok(resolve, "a transcript read is in flight");
      resolve(transcript);
    },
  };
}

function transcriptWith(rows: number): TranscriptResponse {
  return create(TranscriptResponseSchema, {
    jobId: "job_1",
    rows: Array.from({ length: rows }, (_, i) => ({
      row: { case: "event" as const, value: { id: `e${i}`, type: "x" } },
    })),
  });
}

void test("the transcript once caught up, one read for a burst, nothing sent twice, then the events service's failure", async () => {
  const fake = fakeTranscripts("job_1");
  const abort = new AbortController();
  const stream = watchJobTranscript(fake.transcripts, "job_1", { signal: abort.signal });
  const next = () => stream.next();

  // Caught up: the first read, and its answer sent.
  fake.change();
  let sent = next();
  await fake.nextRead();
  // Three events while that read is in flight.
  fake.change(3);
  await fake.drained();
  fake.answer(transcriptWith(1));
  assert.equal((await sent).value?.rows.length, 1);

  // The three cost one read between them.
  sent = next();
  await fake.nextRead();
  fake.answer(transcriptWith(4));
  assert.equal((await sent).value?.rows.length, 4);
  assert.equal(fake.reads, 2);

  // An event that changed nothing the transcript shows: read, not sent; the next change is.
  sent = next();
  fake.change();
  await fake.nextRead();
  await fake.drained();
  fake.answer(transcriptWith(4));
  fake.change();
  await fake.nextRead();
  fake.answer(transcriptWith(5));
  assert.equal((await sent).value?.rows.length, 5, "the unchanged transcript was not sent");
  assert.equal(fake.reads, 4);

  // The events service fails: the stream ends with its error.
  sent = next();
  fake.fail(new ConnectError("the events service does not answer", Code.Unavailable));
  await assert.rejects(sent, (e: unknown) => ConnectError.from(e).code === Code.Unavailable);
  abort.abort();
});

void test("the caller going away ends the stream and stops following the events", async () => {
  const fake = fakeTranscripts("job_1");
  const abort = new AbortController();
  const stream = watchJobTranscript(fake.transcripts, "job_1", { signal: abort.signal });
  fake.change();
  const sent = stream.next();
  await fake.nextRead();
  fake.answer(transcriptWith(1));
  assert.equal((await sent).done, false);
  const last = stream.next();
  abort.abort();
  assert.equal((await last).done, true);
});

void test("the events service ending its stream ends this one, so the caller watches again", async () => {
  const abort = new AbortController();
  const transcripts: JobTranscripts = {
    transcript: () => Promise.resolve(transcriptWith(1)),
    async *changes() {
      yield;
    },
  };
  const stream = watchJobTranscript(transcripts, "job_1", { signal: abort.signal });
  assert.equal((await stream.next()).value?.rows.length, 1);
  await assert.rejects(stream.next(), (e: unknown) => ConnectError.from(e).code === Code.Unavailable);
  abort.abort();
});

void test("streams on one job share one follower: one Watch and one read per change, stopped with the last stream", async () => {
  let follows = 0;
  let following = 0;
  let reads = 0;
  const transcripts: JobTranscripts = {
    transcript: () => Promise.resolve(transcriptWith(++reads)),
    async *changes(_id, signal) {
      follows++;
      following++;
      try {
        yield;
        await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
      } finally {
        following--;
      }
    },
  };
  const followers = new TranscriptFollowers(transcripts);
  const [first, second] = [new AbortController(), new AbortController()];
  const one = followers.watch("job_1", first.signal);
  const two = followers.watch("job_1", second.signal);
  assert.equal((await one.next()).value?.rows.length, 1);
  assert.equal((await two.next()).value?.rows.length, 1, "the same transcript, not read again");
  assert.deepEqual({ follows, reads }, { follows: 1, reads: 1 });

  const oneEnds = one.next();
  first.abort();
  assert.equal((await oneEnds).done, true);
  assert.equal(following, 1, "the other stream still watches");
  const twoEnds = two.next();
  second.abort();
  assert.equal((await twoEnds).done, true);
  await eventually(
    async () => (following === 0 && followers.followed === 0 ? true : undefined),
    "the follower stopped",
  );
});
