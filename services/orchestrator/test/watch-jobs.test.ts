// WatchJobs' first message carries no job and is sent once the stream hears
// every change: a list read when it arrives misses nothing. A client that
// listed first and then opened the stream lost what changed in between (the
// console's approvals page never showed a call that began waiting then).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { createHandlerContext } from "@connectrpc/connect";
import {
  JobEventSchema,
  JobSchema,
  JobService,
  JobState,
  type Job,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { JobFeed } from "../src/jobs/job-feed.js";
import { watchJobs } from "../src/rpc/watch-jobs.js";
import type { JobRecord } from "../src/store/job-store.js";

const stateChanged = (jobId: string, state: JobState) =>
  create(JobEventSchema, { jobId, seq: 1n, event: { case: "stateChanged", value: { state } } });

function stream() {
  const feed = new JobFeed();
  const abort = new AbortController();
  const context = createHandlerContext({
    service: JobService,
    method: JobService.method.watchJobs,
    protocolName: "connect",
    requestMethod: "POST",
    url: "http://localhost/oz0.orchestrator.v1.JobService/WatchJobs",
    requestSignal: abort.signal,
  });
  const store = { getJob: (id: string) => Promise.resolve({ id } as JobRecord) };
  const toProto = (job: JobRecord): Job => create(JobSchema, { id: job.id });
  return { feed, abort, messages: watchJobs({ feed, store, toProto }, context) };
}

void test("the first message has no job and comes once the stream is live; every change after it is sent", async () => {
  const { feed, abort, messages } = stream();
  // A change before the stream was opened is not the stream's: the list read at its first message has it.
  feed.publish("job_before", [stateChanged("job_before", JobState.RUNNING)]);
  let sent = false;
  const pending = messages.next().then((message) => ((sent = true), message));
  // It needs no change to come: it is there before the next turn of the event loop.
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(sent, true, "the first message comes at once, with no change to carry");
  const first = await pending;
  assert.equal(first.done, false);
  assert.equal(first.value?.job, undefined, "the first message carries no job");
  // Right after the first message: the moment a client reads its list. A change now must come on the stream.
  feed.publish("job_after", [stateChanged("job_after", JobState.WAITING)]);
  const next = await messages.next();
  assert.equal(next.value?.job?.id, "job_after");
  abort.abort();
  await messages.return(undefined);
});

void test("a change that comes while the first message is still unread is sent after it, not lost", async () => {
  const { feed, abort, messages } = stream();
  const first = messages.next();
  feed.publish("job_between", [stateChanged("job_between", JobState.RUNNING)]);
  assert.equal((await first).value?.job, undefined);
  assert.equal((await messages.next()).value?.job?.id, "job_between");
  abort.abort();
  await messages.return(undefined);
});
