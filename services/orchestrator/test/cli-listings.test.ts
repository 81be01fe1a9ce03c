// What `oz0 approvals list` and `oz0 jobs cancel` print, against a stand-in for the orchestrator's API: an
// answered call reads as answered (by whom, when), and a command that did nothing says so.
import assert from "node:assert/strict";
import { PassThrough } from "node:stream";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import {
  ApprovalSchema,
  ApprovalState,
  JobSchema,
  JobState,
  type Approval,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { approvalsList, jobsCancel } from "../src/cli/commands.js";
import type { Connection } from "../src/cli/connection.js";

const AT = new Date("2026-12-05T07:00:00Z");
const DEADLINE = new Date("2026-12-05T08:00:00Z");

/** What a command writes to stdout, and what it returned. */
async function printed(run: (io: { out: PassThrough; err: PassThrough }) => Promise<number>) {
  const out = new PassThrough();
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString()));
  const code = await run({ out, err: new PassThrough() });
  return { text, code };
}

function connWith(jobs: Record<string, unknown>): Connection {
  return { clients: { jobs } } as unknown as Connection;
}

void test("oz0 approvals list --all shows each call's state: a waiting one its deadline, an answered one who answered and when", async () => {
  const base = {
    jobId: "job-1",
    tool: "run_command",
    input: { command: "npm test" },
    deadline: timestampFromDate(DEADLINE),
  };
  const approvals: Approval[] = [
    create(ApprovalSchema, { ...base, callId: "c1", state: ApprovalState.PENDING }),
    create(ApprovalSchema, {
      ...base,
      callId: "c2",
      state: ApprovalState.APPROVED,
      answeredBy: "alice",
      answeredAt: timestampFromDate(AT),
    }),
    create(ApprovalSchema, {
      ...base,
      callId: "c3",
      state: ApprovalState.DENIED,
      answeredBy: "bob",
      answeredAt: timestampFromDate(AT),
      reason: "not on a Friday",
    }),
    create(ApprovalSchema, {
      ...base,
      callId: "c4",
      state: ApprovalState.TIMED_OUT,
      answeredAt: timestampFromDate(AT),
    }),
  ];
  const conn = connWith({ listApprovals: async () => ({ approvals, nextPageToken: "" }) });
  const { text } = await printed((io) => approvalsList({ conn, all: true, json: false, io }));
  const [waiting, approved, denied, timedOut] = text.trimEnd().split("\n");
  assert.match(waiting!, /c1 .* waiting \(denied if unanswered by 2026-12-05T08:00:00\.000Z\)$/);
  assert.match(approved!, /c2 .* approved by alice at 2026-12-05T07:00:00\.000Z$/);
  assert.match(denied!, /c3 .* denied by bob at 2026-12-05T07:00:00\.000Z: not on a Friday$/);
  assert.match(timedOut!, /c4 .* timed out \(denied, nobody answered\) at 2026-12-05T07:00:00\.000Z$/);
  for (const line of [approved, denied, timedOut]) assert.doesNotMatch(line!, /unanswered by/, line);
});

void test("oz0 approvals list --job with an unknown job says the job is not found, not that nothing waits", async () => {
  const conn = connWith({
    listApprovals: async () => ({ approvals: [], nextPageToken: "" }),
    getJob: async () => {
      throw new ConnectError("job job_nope not found; list jobs with `oz0 jobs list`", Code.NotFound);
    },
  });
  await assert.rejects(
    printed((io) => approvalsList({ conn, jobId: "job_nope", all: false, json: false, io })),
    /job job_nope not found/,
  );
  // A known job with nothing waiting still says so.
  const known = connWith({
    listApprovals: async () => ({ approvals: [], nextPageToken: "" }),
    getJob: async () => ({ job: create(JobSchema, { id: "job-1", state: JobState.RUNNING }) }),
  });
  const { text } = await printed((io) => approvalsList({ conn: known, jobId: "job-1", all: false, json: false, io }));
  assert.match(text, /^nothing waits for approval/);
});

void test("oz0 jobs cancel on a job that had ended says so and cancels nothing", async () => {
  let cancels = 0;
  const conn = connWith({
    getJob: async () => ({
      job: create(JobSchema, { id: "job-1", state: JobState.SUCCEEDED, finishedAt: timestampFromDate(AT) }),
    }),
    cancelJob: async () => {
      cancels++;
      return { job: create(JobSchema, { id: "job-1", state: JobState.SUCCEEDED }) };
    },
  });
  const { text, code } = await printed((io) => jobsCancel({ conn, jobId: "job-1", io }));
  assert.equal(text, "job job-1 had already ended (succeeded at 2026-12-05T07:00:00.000Z); nothing was cancelled\n");
  assert.equal(code, 0);
  assert.equal(cancels, 0);
});

void test("oz0 jobs cancel on a running job asks for the cancel", async () => {
  let cancels = 0;
  const conn = connWith({
    getJob: async () => ({ job: create(JobSchema, { id: "job-1", state: JobState.RUNNING }) }),
    cancelJob: async () => {
      cancels++;
      return { job: create(JobSchema, { id: "job-1", state: JobState.RUNNING }) };
    },
  });
  const { text } = await printed((io) => jobsCancel({ conn, jobId: "job-1", io }));
  assert.equal(text, "job job-1: cancelling\n");
  assert.equal(cancels, 1);
});
