// The job feed calls its listeners synchronously from the write that stored
// the events. A bystander's write (an answer taken at a replica that does not
// run the job) must not pass its unfenced scope on to what a listener starts.
// Every job's state changes reach subscribeChanges (WatchJobs), on a cluster
// too.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema, JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { EventsAppended } from "../src/cluster/cluster-notifier.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { asBystander, isBystander } from "../src/cluster/job-ownership.js";

void test("a listener runs outside the bystander scope of the write that published to it", async () => {
  const feed = new JobFeed();
  const seen: boolean[] = [];
  const later: Promise<boolean>[] = [];
  feed.subscribe("job_1", () => {
    seen.push(isBystander());
    // Work a listener starts (a graph job noting a step's approval) outlives the write.
    later.push(new Promise((resolve) => setTimeout(() => resolve(isBystander()), 10)));
  });
  await asBystander(async () => {
    assert.equal(isBystander(), true);
    feed.publish("job_1", [
      create(JobEventSchema, { jobId: "job_1", seq: 1n, event: { case: "text", value: { text: "hi" } } }),
    ]);
  });
  assert.deepEqual(seen, [false]);
  assert.deepEqual(await Promise.all(later), [false]);
});

const stateChanged = (jobId: string, seq: number, state: JobState) =>
  create(JobEventSchema, { jobId, seq: BigInt(seq), event: { case: "stateChanged", value: { state } } });
const text = (jobId: string, seq: number) =>
  create(JobEventSchema, { jobId, seq: BigInt(seq), event: { case: "text", value: { text: "hi" } } });

void test("subscribeChanges hears every job's state changes and permission requests and decisions (no text) until it unsubscribes", () => {
  const feed = new JobFeed();
  const heard: string[] = [];
  const stop = feed.subscribeChanges((jobId, event) =>
    heard.push(
      `${jobId}:${event.event.case === "stateChanged" ? JobState[event.event.value.state] : event.event.case}`,
    ),
  );
  feed.publish("job_a", [
    stateChanged("job_a", 1, JobState.PENDING),
    text("job_a", 2),
    stateChanged("job_a", 3, JobState.RUNNING),
  ]);
  feed.publish("job_a", [
    create(JobEventSchema, {
      jobId: "job_a",
      seq: 4n,
      event: { case: "permissionDecision", value: { id: "p1", pending: true } },
    }),
  ]);
  feed.subscribe("job_b", () => undefined);
  feed.publish("job_b", [stateChanged("job_b", 1, JobState.SUCCEEDED)]);
  stop();
  feed.publish("job_a", [stateChanged("job_a", 4, JobState.SUCCEEDED)]);
  assert.deepEqual(heard, ["job_a:PENDING", "job_a:RUNNING", "job_a:permissionDecision", "job_b:SUCCEEDED"]);
});

void test("on a cluster, a state change another replica appended to a job nobody here watches is read and heard", async () => {
  const feed = new JobFeed();
  let notify!: (appended: EventsAppended) => void;
  const reads: string[] = [];
  feed.followCluster({
    listJobEvents: async (jobId, afterSeq) => {
      reads.push(`${jobId}>${afterSeq}`);
      return [text(jobId, 5), stateChanged(jobId, 6, JobState.WAITING)];
    },
    subscribeAppended: (handler) => {
      notify = handler;
      return () => undefined;
    },
  });
  notify({ jobId: "job_x", fromSeq: 5, seq: 6 });
  assert.deepEqual(reads, [], "nobody listens to states yet: nothing is read");
  const heard = new Promise<string>((resolve) =>
    feed.subscribeChanges((jobId, event) =>
      resolve(`${jobId}:${event.event.case === "stateChanged" ? JobState[event.event.value.state] : "?"}`),
    ),
  );
  notify({ jobId: "job_x", fromSeq: 5, seq: 6 });
  assert.equal(await heard, "job_x:WAITING");
  assert.deepEqual(reads, ["job_x>4"]);
});
