// The job feed calls its listeners synchronously from the write that stored
// the events. A bystander's write (an answer taken at a replica that does not
// run the job) must not pass its unfenced scope on to what a listener starts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
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
    feed.publish("job_1", [create(JobEventSchema, { jobId: "job_1", seq: 1n, event: { case: "text", value: { text: "hi" } } })]);
  });
  assert.deepEqual(seen, [false]);
  assert.deepEqual(await Promise.all(later), [false]);
});
