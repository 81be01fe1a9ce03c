import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { ApprovalSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { approvalGroups, CARDS_PER_JOB } from "../src/approval-groups.js";

const call = (jobId: string, callId: string) => create(ApprovalSchema, { jobId, callId });

void test("a job that floods the queue shows its first cards and a count; another job's call stays near the top", () => {
  const queue = [
    call("job_flood", "f0"),
    call("job_flood", "f1"),
    call("job_legit", "l0"),
    ...Array.from({ length: 3000 }, (_, i) => call("job_flood", `f${i + 2}`)),
  ];
  const groups = approvalGroups(queue, new Set());
  assert.deepEqual(
    groups.map((g) => g.jobId),
    ["job_flood", "job_legit"],
    "jobs in the order of their oldest call",
  );
  const [flood, legit] = groups;
  assert.equal(flood?.approvals.length, 3002, "the count covers every call of the job");
  assert.deepEqual(
    flood?.shown.map((a) => a.callId),
    ["f0", "f1", "f2"],
  );
  assert.equal(CARDS_PER_JOB, 3);
  assert.deepEqual(
    legit?.shown.map((a) => a.callId),
    ["l0"],
    "the other job's call is the fourth card on the page",
  );
  const expanded = approvalGroups(queue, new Set(["job_flood"]));
  assert.equal(expanded[0]?.shown.length, 3002, "a job the person expanded shows every call");
});
