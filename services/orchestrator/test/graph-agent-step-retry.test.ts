// An agent step the manager asks to retry runs its agent again, in a job of
// its own. The step's job was recorded under the step's idempotency key
// alone, and a job this executor had not seen fail was re-attached: a retry
// of a step whose job succeeded but whose reply the step could not use (a
// choice evaluator's sentence instead of a label) read the same reply again
// until the manager's retries ran out; and after a restart, the retry the
// manager had granted re-read the failed job it was granted for. And a step
// whose prompt no job takes says so in the graph's words.
import assert from "node:assert/strict";
import { test } from "node:test";
import { GraphRunner, type GraphDefinition, type GraphManager } from "@oz0/graph";
import { SessionGraphExecutor } from "../src/graphs/graph-executor.js";
import { checkJobInput } from "../src/jobs/job-input.js";
import type { JobRecord } from "../src/store/job-store.js";

/** The job machinery an agent step uses, in memory: each job ends at once with what `reply` says. */
function executorWith(
  jobs: Map<string, JobRecord>,
  stepJobs: Map<string, string>,
  reply: (n: number) => JobRecord["state"] | string,
) {
  let started = 0;
  const created: string[] = [];
  const executor = new SessionGraphExecutor({
    graphStore: {
      getStepJob: async (key: string) => stepJobs.get(key),
      putStepJob: async (r: { idempotencyKey: string; stepJobId: string }) =>
        void stepJobs.set(r.idempotencyKey, r.stepJobId),
    },
    store: { getJob: async (id: string) => jobs.get(id) },
    feed: { subscribe: () => () => undefined },
    jobs: {
      runAgent: async (o: { id: string; agent: string; input: string }) => {
        // The job runner refuses an input it does not take, before it stores anything.
        checkJobInput(o.input);
        const answer = reply(++started);
        const failed = answer === "failed";
        jobs.set(o.id, {
          id: o.id,
          agentName: o.agent,
          state: failed ? "failed" : "succeeded",
          resultText: failed ? "" : answer,
          error: failed ? "the model call failed" : "",
        } as JobRecord);
        created.push(o.id);
      },
      cancel: async () => undefined,
    },
    graphJobId: "graph_1",
    pinnedAgents: {},
    pluginPath: "/plugins/graphs",
    pollMs: 10,
  } as unknown as ConstructorParameters<typeof SessionGraphExecutor>[0]);
  return { executor, created };
}

const retrying: GraphManager = { decide: async () => ({ action: "retry" }) };

void test("a retried evaluator whose reply was no label runs again, in a job of its own", async () => {
  const definition: GraphDefinition = {
    format: "oz0.graph/v1",
    kind: "harness",
    name: "inbox",
    id: "harness:inbox",
    root: [
      {
        kind: "choice",
        id: "choice:triage",
        key: "choice",
        evaluator: { kind: "agent", id: "agent:triage", agent: "triage" },
        arms: [{ label: "bug", flow: [{ kind: "agent", id: "agent:fixer", agent: "fixer" }] }],
        otherwise: [],
      },
    ],
  };
  const jobs = new Map<string, JobRecord>();
  const { executor, created } = executorWith(jobs, new Map(), (n) =>
    n === 1 ? "I have read the mail.\nIt looks like a bug report to me." : n === 2 ? "bug" : "fixed",
  );
  const result = await new GraphRunner({ definition, executor, manager: retrying, maxRetries: 1 }).run({
    prompt: "the app crashes",
    runId: "graph_1",
  });
  assert.equal(result.status, "succeeded", result.error?.message);
  assert.equal(result.bag.choice, "bug");
  assert.equal(result.output, "fixed");
  assert.equal(created.length, 3, "triage twice (the retry ran it again), then the fixer");
});

void test("after a restart, the retry the manager granted runs a job of its own, not the failed one again", async () => {
  const jobs = new Map<string, JobRecord>();
  const stepJobs = new Map<string, string>();
  const step = {
    agent: "writer",
    prompt: "p",
    runId: "graph_1",
    stepId: "agent:writer",
    path: "/0",
    iteration: 0,
    idempotencyKey: "graph_1/0",
  };
  const first = executorWith(jobs, stepJobs, () => "failed");
  await assert.rejects(
    first.executor.runAgent({ ...step, attempt: 1, signal: new AbortController().signal }),
    /agent writer \(job \S+\) ended failed/,
  );
  // The manager's retry was recorded, and the orchestrator stopped before attempt 2's job was.
  const restarted = executorWith(jobs, stepJobs, () => "written");
  const second = await restarted.executor.runAgent({ ...step, attempt: 2, signal: new AbortController().signal });
  assert.equal(second.text, "written");
  assert.equal(restarted.created.length, 1, "attempt 2 ran");
  // Once recorded, attempt 2's job is what a later restart follows.
  const again = executorWith(jobs, stepJobs, () => "a third run");
  assert.equal(
    (await again.executor.runAgent({ ...step, attempt: 2, signal: new AbortController().signal })).text,
    "written",
  );
  assert.equal(again.created.length, 0);
});

void test("an agent step whose prompt is too large for a job says so in the graph's words", async () => {
  const { executor, created } = executorWith(new Map(), new Map(), () => "unused");
  // A coder's 3 MB reply is the next step's `Previous output`.
  const prompt = `fix the test\n\nPrevious output:\n${"x".repeat(3 * 1024 * 1024)}`;
  await assert.rejects(
    executor.runAgent({
      agent: "reviewer",
      prompt,
      runId: "graph_1",
      stepId: "agent:reviewer",
      path: "/0/1/until/0",
      iteration: 1,
      idempotencyKey: "graph_1/0/1/until/0",
      attempt: 1,
      signal: new AbortController().signal,
    }),
    (error: Error) => {
      assert.match(error.message, /agent step agent:reviewer at \/0\/1\/until\/0: its prompt .* is 3145759 bytes/);
      assert.match(error.message, /have the step before it write less to output/);
      assert.doesNotMatch(error.message, /--attach/);
      return true;
    },
  );
  assert.equal(created.length, 0);
});
