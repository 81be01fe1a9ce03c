// Many WatchJobTranscript streams of one job, opened by a viewer against the
// real stack while the owner works the job: they cost the events service what
// one stream does (one Watch, one transcript read per change; counted from the
// events service's own RPC spans, sent to an OTLP receiver), each stream still
// gets the whole transcript in order, and one person's streams beyond
// OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON are refused with RESOURCE_EXHAUSTED
// while others' are not. Once, every stream opened its own Watch and read the
// whole transcript on each change: 200 streams of a viewer made the owner's
// GetJobTranscript time out.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { equals } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { TranscriptResponseSchema, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobService, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { bearerInterceptor, newCredential } from "@oz0/serving";
import { echoTheInput, writeGuardedPlugin, writeViewerAuth } from "./support/console-browser.js";
import { startOtlpReceiverProcess, type OtlpReceiverProcess } from "./support/otlp-receiver-process.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

/** The viewer's limit, and as many streams as the first test opens. */
const STREAMS = 24;
const SERVER_SPAN = 2;

let t: TestStack;
let receiver: OtlpReceiverProcess;
const viewerToken = newCredential();
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-transcript-watchers-"));

/** JobService over HTTP/2 as whoever holds `token`: every stream of a person on one connection. */
const jobsAs = (token: string) =>
  createClient(JobService, createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(token)] }));

before(async () => {
  // Every service of the stack exports its spans here (the variables are inherited).
  receiver = await startOtlpReceiverProcess();
  const auth = writeViewerAuth(path.join(scratch, "auth.json"), "vera", viewerToken);
  const repo = await writeGuardedPlugin(path.join(scratch, "repo"));
  t = await startTestStack({
    pick: echoTheInput,
    orchestratorEnv: { OZ0_AUTH_CONFIG: auth, OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON: String(STREAMS) },
  });
  await createClient(
    PluginService,
    createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  ).installPlugin({ source: repo });
});

after(async () => {
  await t?.close();
  receiver?.stop();
  rmSync(scratch, { recursive: true, force: true });
});

/** A job of the owner's that waits for the owner's approval of its one call. */
async function waitingJob(): Promise<{ jobId: string; callId: string }> {
  const owner = jobsAs(t.stack.ownerToken);
  const { job } = await owner.runAgent({ agent: "guarded", input: "hello" });
  const jobId = job!.id;
  const [approval] = await eventually(async () => {
    const { approvals } = await owner.listApprovals({ jobId });
    return approvals.length > 0 ? approvals : undefined;
  });
  return { jobId, callId: approval!.callId };
}

/** A stream of the viewer's on `jobId`: every transcript it was sent, until `stop` aborts. */
function viewerStream(jobId: string, stop: AbortSignal) {
  const received: TranscriptResponse[] = [];
  const done = (async () => {
    try {
      for await (const { transcript } of jobsAs(viewerToken).watchJobTranscript({ jobId }, { signal: stop }))
        received.push(transcript!);
    } catch (error) {
      if (!stop.aborted) throw error;
    }
  })();
  return { received, done };
}

/** A new stream of the viewer's on `jobId`, once it was refused or sent its first transcript. */
async function firstAnswer(
  jobId: string,
  stop: AbortSignal,
): Promise<{ refused: ConnectError } | { served: ReturnType<typeof viewerStream> }> {
  const stream = viewerStream(jobId, stop);
  let ended = false;
  const refusal = stream.done.then(
    () => ({ refused: new ConnectError("the stream ended without an answer") }),
    (error: unknown) => ({ refused: ConnectError.from(error) }),
  );
  void refusal.finally(() => (ended = true));
  // Stops polling once the stream ended (the refusal has won the race by then).
  const served = eventually(async () => (stream.received.length > 0 || ended ? { served: stream } : undefined));
  return Promise.race([refusal, served]);
}

const rowIds = (transcript: TranscriptResponse): string[] =>
  transcript.rows.map((r) =>
    r.row.case === "event" ? r.row.value.id : `operation:${r.row.value?.operationInvocationId}`,
  );

async function serverSpans(name: string): Promise<number> {
  const { spans } = await receiver.received();
  return spans.filter((s) => s.kind === SERVER_SPAN && s.name === name).length;
}

void test(`${STREAMS} streams of a viewer on one job: one events Watch, one transcript read per change, and each stream the whole transcript in order`, async (context) => {
  const { jobId, callId } = await waitingJob();
  const stop = new AbortController();
  const streams = Array.from({ length: STREAMS }, () => viewerStream(jobId, stop.signal));
  await eventually(async () => (streams.every((s) => s.received.length > 0) ? true : undefined));

  // The owner works on: the job goes on, and every stream follows it to its end.
  const owner = jobsAs(t.stack.ownerToken);
  await owner.answerPermission({ jobId, callId, allow: true });
  const final = await eventually(async () => {
    const { transcript } = await owner.getJobTranscript({ jobId });
    const ended = transcript!.rows.some((r) => r.row.case === "event" && r.row.value.type === "job.completed");
    const everyStreamHasIt = streams.every((s) => equals(TranscriptResponseSchema, s.received.at(-1)!, transcript!));
    return ended && everyStreamHasIt ? transcript! : undefined;
  });
  stop.abort();
  await Promise.all(streams.map((s) => s.done));

  // In order: each transcript a stream was sent holds every row of the one
  // before, its rows in the job's order (by time: an event that arrived late
  // may go before rows already sent), and none was sent twice.
  const finalIds = rowIds(final);
  for (const { received } of streams) {
    let before = new Set<string>();
    received.forEach((transcript, i) => {
      const ids = rowIds(transcript);
      const held = new Set(ids);
      assert.ok(
        [...before].every((id) => held.has(id)),
        "a transcript keeps the rows of the one sent before it",
      );
      assert.deepEqual(
        ids,
        finalIds.filter((id) => held.has(id)),
        "rows in the job's order",
      );
      if (i > 0) assert.ok(!equals(TranscriptResponseSchema, received[i - 1]!, transcript), "none sent twice");
      before = held;
    });
  }

  // What the events service was asked, by its own spans: the orchestrator's
  // streams end (their spans are in) after the reads they made, and the
  // events service's Watch ends after every read of its follower.
  const eventsSpans = await eventually(async () => {
    const streamsEnded = await serverSpans("oz0.orchestrator.v1.JobService/WatchJobTranscript");
    const watches = await serverSpans("oz0.events.v1.EventsService/Watch");
    return streamsEnded >= STREAMS && watches >= 2
      ? {
          watches,
          reads: await serverSpans("oz0.events.v1.EventsService/Transcript"),
          ownerReads: await serverSpans("oz0.orchestrator.v1.JobService/GetJobTranscript"),
        }
      : undefined;
  });
  // One follower: the Watch up to the job's events so far, then the Watch that follows it.
  assert.equal(
    eventsSpans.watches,
    2,
    `events Watch calls for ${STREAMS} streams (and ${eventsSpans.reads - eventsSpans.ownerReads} transcript reads)`,
  );
  const changes = final.rows.length;
  assert.ok(changes + 1 < STREAMS, `the job has fewer events (${changes}) than streams, so a read per stream shows`);
  const followerReads = eventsSpans.reads - eventsSpans.ownerReads;
  context.diagnostic(
    `events Watch calls: ${eventsSpans.watches}; transcript reads: ${followerReads}; events: ${changes}`,
  );
  assert.ok(
    followerReads <= changes + 1,
    `${followerReads} transcript reads for ${STREAMS} streams and ${changes} events: at most one per change`,
  );
});

void test("one person's streams beyond OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON are refused, saying what to do; nobody else's are", async () => {
  const { jobId } = await waitingJob();
  const stop = new AbortController();
  const streams = Array.from({ length: STREAMS }, () => viewerStream(jobId, stop.signal));
  try {
    await refusedBeyondTheLimit(jobId, streams);
  } finally {
    stop.abort();
  }
  await Promise.all(streams.map((s) => s.done));

  // A stream the viewer closed makes room for another.
  const closing = new AbortController();
  const again = await eventually(async () => {
    const answer = await firstAnswer(jobId, closing.signal);
    return "served" in answer ? answer.served : undefined;
  });
  assert.ok(again.received.length > 0);
  closing.abort();
  await again.done;
});

async function refusedBeyondTheLimit(jobId: string, streams: ReturnType<typeof viewerStream>[]): Promise<void> {
  await eventually(async () => (streams.every((s) => s.received.length > 0) ? true : undefined));
  const oneMore = new AbortController();
  const refused = await firstAnswer(jobId, oneMore.signal);
  oneMore.abort();
  assert.ok("refused" in refused, `stream ${STREAMS + 1} of one person was served`);
  assert.equal(refused.refused.code, Code.ResourceExhausted);
  assert.match(refused.refused.rawMessage, /OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON/);
  assert.match(refused.refused.rawMessage, /close one \(a console tab showing a job\)/);

  // The owner is another person: their stream is served, with the whole transcript.
  const ownerStop = new AbortController();
  const ownerStream = jobsAs(t.stack.ownerToken).watchJobTranscript({ jobId }, { signal: ownerStop.signal });
  const { value } = await ownerStream[Symbol.asyncIterator]().next();
  assert.deepEqual(rowIds(value!.transcript!), rowIds(streams[0]!.received.at(-1)!));
  ownerStop.abort();
}
