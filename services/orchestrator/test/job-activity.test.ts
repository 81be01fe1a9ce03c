// What a job does now, folded from its events: the fold behind Job.activity
// (GetJob) and the CLI's status line. The real stack shows it end to end in
// terminal-progress.test.ts; here each turn of the fold on its own.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromMs } from "@bufbuild/protobuf/wkt";
import {
  JobActivityKind,
  JobEventSchema,
  JobState,
  type JobEvent,
} from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { readStepNote, stepNote, stepWhere } from "../src/graphs/graph-step-notes.js";
import { JobActivityTracker } from "../src/jobs/job-activity.js";

let seq = 0;
const at = (ms: number, event: MessageInitShape<typeof JobEventSchema>["event"]): JobEvent =>
  create(JobEventSchema, { jobId: "job_1", seq: BigInt(++seq), time: timestampFromMs(ms), event });
const summary = (tracker: JobActivityTracker, approvers: string[] = []): [string, string, number] => {
  const activity = tracker.activity(approvers);
  return [
    JobActivityKind[activity.kind],
    activity.summary,
    activity.since ? Number(activity.since.seconds) * 1000 + activity.since.nanos / 1e6 : 0,
  ];
};

void test("an agent's job: starting, the harness at work, a tool, a call waiting for its approvers, a refusal, the end", () => {
  const tracker = new JobActivityTracker();
  tracker.observe(at(1000, { case: "stateChanged", value: { state: JobState.PENDING, reason: "" } }));
  assert.deepEqual(summary(tracker), [
    "STARTING",
    "starting (waiting for a sandbox node and the session's start)",
    1000,
  ]);
  tracker.observe(at(1100, { case: "sessionStarted", value: { harnessName: "fake" } }));
  tracker.observe(at(1101, { case: "stateChanged", value: { state: JobState.RUNNING, reason: "" } }));
  tracker.observe(at(1500, { case: "text", value: { itemId: "t", text: "Reading", delta: true, role: "" } }));
  assert.deepEqual(
    summary(tracker),
    ["MODEL", "harness at work (its model or its own code)", 1100],
    "text streaming is still the model's turn",
  );
  tracker.observe(at(2000, { case: "usage", value: { model: "m", inputTokens: 120n, outputTokens: 7n } }));
  tracker.observe(at(2001, { case: "toolCall", value: { callId: "c1", tool: "read_file" } }));
  tracker.observe(at(2002, { case: "toolCall", value: { callId: "c2", tool: "run_command" } }));
  assert.deepEqual(summary(tracker), ["TOOL", "2 tools read_file, run_command", 2001]);
  tracker.observe(at(2100, { case: "toolResult", value: { callId: "c1", isError: false } }));
  tracker.observe(
    at(2101, { case: "permissionDecision", value: { id: "perm-2", callId: "c2", tool: "run_command", pending: true } }),
  );
  assert.deepEqual(summary(tracker, ["alice", "reviewers"]), [
    "APPROVAL",
    "waiting for approval of run_command by alice, reviewers",
    2101,
  ]);
  assert.deepEqual(summary(tracker), [
    "APPROVAL",
    "waiting for approval of run_command by anyone with the approver role",
    2101,
  ]);
  // Denied: no tool result follows; the model reads the refusal.
  tracker.observe(
    at(3000, {
      case: "permissionDecision",
      value: { id: "perm-2", callId: "c2", tool: "run_command", pending: false, allow: false },
    }),
  );
  assert.deepEqual(summary(tracker), ["MODEL", "harness at work (its model or its own code)", 3000]);
  tracker.observe(at(3500, { case: "usage", value: { model: "m", inputTokens: 30n, outputTokens: 3n } }));
  assert.deepEqual(tracker.tokens, { input: 150, output: 10, cacheRead: 0, cacheWrite: 0 });
  tracker.observe(at(4000, { case: "stateChanged", value: { state: JobState.SUCCEEDED, reason: "" } }));
  assert.deepEqual(summary(tracker), ["ENDED", "succeeded", 4000]);
  assert.equal(tracker.ended, true);
});

void test("a graph run: the steps that started and have not ended, read back from the run's own lines", () => {
  const tracker = new JobActivityTracker();
  const note = (ms: number, text: string): JobEvent =>
    at(ms, { case: "text", value: { itemId: "graph", text, delta: false, role: "" } });
  const research = stepWhere({ nodeId: "agent:search", path: "/0/b0/0" });
  const draft = stepWhere({ nodeId: "agent:drafter", path: "/0/b1/0", iteration: 2 });
  tracker.observe(at(1000, { case: "stateChanged", value: { state: JobState.RUNNING, reason: "" } }));
  tracker.observe(note(1001, stepNote("started", research)));
  tracker.observe(note(1002, stepNote("started", draft)));
  assert.deepEqual(summary(tracker), [
    "STEPS",
    "2 steps agent:search /0/b0/0, agent:drafter /0/b1/0 (iteration 2)",
    1001,
  ]);
  // A failure's message may say anything, "started" included: the step still ends.
  tracker.observe(note(1500, stepNote("failed", research, ": the step started badly")));
  tracker.observe(note(1600, "  agent:drafter /0/b1/0: runs as job job_9\n"));
  assert.deepEqual(summary(tracker), ["STEPS", "step agent:drafter /0/b1/0 (iteration 2)", 1002]);
  tracker.observe(note(1700, stepNote("finished", draft, ", set output")));
  assert.deepEqual(summary(tracker), ["STEPS", "between steps", 1000]);
  tracker.observe(
    at(1800, { case: "stateChanged", value: { state: JobState.WAITING, reason: "a step waits for approval" } }),
  );
  assert.deepEqual(summary(tracker), ["APPROVAL", "a step waits for approval (oz0 approvals list)", 1800]);
});

void test("a step note reads back as the step it was written for, and no other line does", () => {
  const where = stepWhere({ nodeId: "step:parse", path: "/1", iteration: 3 });
  for (const [kind, detail] of [
    ["started", ""],
    ["finished", ", set a, b"],
    ["replayed", ""],
    ["failed", ": boom started finished"],
  ] as const) {
    assert.deepEqual(readStepNote(stepNote(kind, where, detail)), { kind, where });
  }
  assert.equal(readStepNote("! agent:x /0 step_error: it failed"), undefined);
  assert.equal(readStepNote("cancel requested: by alice\n"), undefined);
});
