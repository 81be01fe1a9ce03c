// A custom step the manager asks to retry runs again, in a session of its
// own. Its session id came from the step's idempotency key alone, and the
// executor re-attaches before it starts: a retry found the failed session
// (the node keeps ended sessions for minutes) and read its failure again,
// until the manager's retries ran out, without the step ever running twice.
// After a restart the executor starts from the engine's attempt, so the
// failures the manager already decided are not read again.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import {
  GraphRunner,
  HarnessContext,
  InMemoryCheckpointStore,
  type CheckpointStore,
  type GraphDefinition,
  type GraphManager,
  type StepRecord,
} from "@oz0/graph";
import { SessionEventSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SessionGraphExecutor } from "../src/graphs/graph-executor.js";
import { MessageQueue } from "../src/sessions/message-queue.js";
import type { SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import {
  SessionNotFoundError,
  type SandboxMessage,
  type SessionChannel,
  type SessionRunner,
  type StartSessionOptions,
} from "../src/sessions/session-runner.js";

/** A node that keeps every session it ran, and answers a re-attach with its messages. */
class RecordingNode implements SessionRunner {
  readonly url = "scripted://node";
  readonly started: string[] = [];
  readonly #ended = new Map<string, SandboxMessage[]>();
  constructor(readonly outcome: (attempt: number) => "fails" | "succeeds" | "breaks then succeeds") {}

  start(options: StartSessionOptions): SessionChannel {
    const sessionId = options.request.sessionId;
    this.started.push(sessionId);
    const outcome = this.outcome(this.started.length);
    const succeeds = outcome !== "fails";
    const messages: SandboxMessage[] = [
      { seq: 1, kind: "started", sessionId },
      {
        seq: 2,
        kind: "event",
        event: create(SessionEventSchema, {
          event: {
            case: "result",
            value: succeeds
              ? { stopReason: StopReason.COMPLETED, text: JSON.stringify({ set: { done: true } }) }
              : { stopReason: StopReason.ERROR, error: "step_error: the step threw" },
          },
        }),
      },
      { seq: 3, kind: "exited", exitCode: succeeds ? 0 : 1, signal: "", error: "" },
    ];
    this.#ended.set(sessionId, messages);
    // The stream breaks after the start; the session runs on and ends well, as a re-attach finds.
    if (outcome === "breaks then succeeds") return brokenChannel(messages.slice(0, 1));
    return channel(messages);
  }

  reattach(options: { sessionId: string }): SessionChannel {
    const messages = this.#ended.get(options.sessionId);
    if (!messages) {
      return {
        // eslint-disable-next-line require-yield -- a channel that throws at once, as the sandbox client's does
        [Symbol.asyncIterator]: async function* () {
          throw new SessionNotFoundError(options.sessionId);
        },
        answerPermission: async () => undefined,
        answerRuntimeTool: async () => undefined,
        close: () => undefined,
      };
    }
    return channel(messages);
  }

  async cancel(): Promise<void> {}
}

function channel(messages: SandboxMessage[]): SessionChannel {
  const queue = new MessageQueue<SandboxMessage>();
  for (const message of messages) queue.push(message);
  queue.end();
  return {
    [Symbol.asyncIterator]: () => queue[Symbol.asyncIterator](),
    answerPermission: async () => undefined,
    answerRuntimeTool: async () => undefined,
    close: () => queue.end(),
  };
}

function brokenChannel(messages: SandboxMessage[]): SessionChannel {
  return {
    [Symbol.asyncIterator]: async function* () {
      yield* messages;
      throw Object.assign(new Error("the stream broke"), { code: "ECONNRESET" });
    },
    answerPermission: async () => undefined,
    answerRuntimeTool: async () => undefined,
    close: () => undefined,
  };
}

function executorOn(node: SessionRunner): SessionGraphExecutor {
  const placement: SandboxPlacement = {
    tracksNodes: false,
    place: async () => node,
    runnerForSession: async () => node,
    release: async () => undefined,
    lostSessions: async () => [],
    lostSession: async () => undefined,
  };
  // A custom step reads none of the job machinery: only its placement and plugin folder.
  return new SessionGraphExecutor({
    placement,
    graphJobId: "graph_1",
    pinnedAgents: {},
    pluginPath: "/plugins/steps",
  } as unknown as ConstructorParameters<typeof SessionGraphExecutor>[0]);
}

const step = {
  runId: "graph_1",
  stepId: "step:check",
  path: "/0",
  iteration: 0,
  idempotencyKey: "graph_1/0",
  attempt: 1,
  name: "check",
  module: "steps/check.mjs",
};

void test("a retried custom step runs in a new session, and a restarted executor re-attaches the attempt the run is at", async () => {
  const node = new RecordingNode((attempt) => (attempt === 1 ? "fails" : "succeeds"));
  const executor = executorOn(node);
  const run = (attempt: number) =>
    executor.runCustomStep({ ...step, attempt, signal: new AbortController().signal, ctx: new HarnessContext() });
  await assert.rejects(run(1), /custom step check failed in the sandbox: step_error: the step threw/);
  assert.deepEqual(await run(2), { set: { done: true } });
  assert.equal(node.started.length, 2, "the retry started a session of its own");
  assert.notEqual(node.started[0], node.started[1]);

  // A restart: the resumed run is at attempt 2 (attempt 1's failure was decided): its session is the retry's.
  const restarted = executorOn(node);
  assert.deepEqual(
    await restarted.runCustomStep({
      ...step,
      attempt: 2,
      signal: new AbortController().signal,
      ctx: new HarnessContext(),
    }),
    { set: { done: true } },
  );
  assert.equal(node.started.length, 2, "nothing ran a third time");
});

void test("a custom step whose stream broke is followed again by its retry, not started a second time", async () => {
  const node = new RecordingNode(() => "breaks then succeeds");
  const executor = executorOn(node);
  const run = (attempt: number) =>
    executor.runCustomStep({ ...step, attempt, signal: new AbortController().signal, ctx: new HarnessContext() });
  await assert.rejects(run(1));
  assert.deepEqual(await run(2), { set: { done: true } });
  assert.equal(node.started.length, 1, "the retry re-attached to the session that ran on");
});

void test("a restart during a retried custom step follows the retry's session, not the failure the manager already decided", async () => {
  // Attempt 1 fails, the manager grants a retry (recorded), attempt 2's session succeeds, and the
  // orchestrator dies before the step's record. The resumed run is at attempt 2: it must read
  // attempt 2's session. Re-attaching attempt 1's failed one reported that failure again, asked the
  // manager again and spent a retry, here the last one, failing a run whose step had succeeded.
  const node = new RecordingNode((attempt) => (attempt === 1 ? "fails" : "succeeds"));
  const definition: GraphDefinition = {
    format: "oz0.graph/v1",
    kind: "harness",
    name: "steps",
    id: "harness:steps",
    root: [{ kind: "step", id: "step:check", step: "check", module: "steps/check.mjs" }],
  };
  const store = new InMemoryCheckpointStore();
  let decisions = 0;
  const manager: GraphManager = {
    decide: async () => {
      decisions++;
      return { action: "retry" };
    },
  };
  // The first process dies as it records the step: the record never lands.
  let crashed!: () => void;
  const crash = new Promise<void>((resolve) => (crashed = resolve));
  const dying: CheckpointStore = {
    createRun: (run) => store.createRun(run),
    getRun: (runId) => store.getRun(runId),
    listRuns: (filter) => store.listRuns(filter),
    loadSteps: (runId) => store.loadSteps(runId),
    finishRun: (runId, end) => store.finishRun(runId, end),
    reopenRun: (runId) => store.reopenRun(runId),
    recordStep: (runId: string, record: StepRecord) =>
      record.outcome === "ok" ? (crashed(), new Promise<StepRecord>(() => undefined)) : store.recordStep(runId, record),
  };
  const first = new GraphRunner({ definition, executor: executorOn(node), store: dying, manager, maxRetries: 1 });
  await first.start({ prompt: "p", runId: "graph_1" });
  await crash;
  assert.equal(decisions, 1);

  const restarted = new GraphRunner({ definition, executor: executorOn(node), store, manager, maxRetries: 1 });
  const result = await (await restarted.resume({ runId: "graph_1" })).result;
  assert.equal(result.status, "succeeded", result.error?.message);
  assert.equal(result.bag.done, true);
  assert.equal(decisions, 1, "the manager decided attempt 1's failure once");
  assert.equal(node.started.length, 2, "nothing ran a third time");
});

/** A node whose first session runs until it is cancelled; later ones succeed at once. */
class StuckOnceNode implements SessionRunner {
  readonly url = "scripted://stuck";
  readonly started: string[] = [];
  readonly cancels: { sessionId: string; reason: string }[] = [];
  readonly #running = new Map<string, MessageQueue<SandboxMessage>>();

  start(options: StartSessionOptions): SessionChannel {
    const sessionId = options.request.sessionId;
    this.started.push(sessionId);
    if (this.started.length > 1) {
      return channel([
        { seq: 1, kind: "started", sessionId },
        {
          seq: 2,
          kind: "event",
          event: create(SessionEventSchema, {
            event: { case: "result", value: { stopReason: StopReason.COMPLETED, text: '{"set":{"done":true}}' } },
          }),
        },
        { seq: 3, kind: "exited", exitCode: 0, signal: "", error: "" },
      ]);
    }
    const queue = new MessageQueue<SandboxMessage>();
    queue.push({ seq: 1, kind: "started", sessionId });
    this.#running.set(sessionId, queue);
    return {
      [Symbol.asyncIterator]: () => queue[Symbol.asyncIterator](),
      answerPermission: async () => undefined,
      answerRuntimeTool: async () => undefined,
      close: () => queue.end(),
    };
  }

  reattach(options: { sessionId: string }): SessionChannel {
    return {
      // eslint-disable-next-line require-yield -- a channel that throws at once, as the sandbox client's does
      [Symbol.asyncIterator]: async function* () {
        throw new SessionNotFoundError(options.sessionId);
      },
      answerPermission: async () => undefined,
      answerRuntimeTool: async () => undefined,
      close: () => undefined,
    };
  }

  async cancel(options: { sessionId: string; reason: string }): Promise<void> {
    this.cancels.push(options);
    const queue = this.#running.get(options.sessionId);
    queue?.push({ seq: 2, kind: "exited", exitCode: 1, signal: "SIGTERM", error: "cancelled" });
    queue?.end();
  }
}

void test("a custom step past its timeout has its session cancelled, saying why, and the retry runs in a new session", async () => {
  const node = new StuckOnceNode();
  const definition: GraphDefinition = {
    format: "oz0.graph/v1",
    kind: "harness",
    name: "steps",
    id: "harness:steps",
    root: [{ kind: "step", id: "step:check", step: "check", module: "steps/check.mjs", timeout: "1s" }],
  };
  const codes: string[] = [];
  const manager: GraphManager = {
    decide: async (event) => {
      codes.push(event.kind === "step_error" ? event.error.code : event.kind);
      return { action: "retry" };
    },
  };
  const runner = new GraphRunner({ definition, executor: executorOn(node), manager });
  const result = await runner.run({ prompt: "p", runId: "graph_1" });
  assert.equal(result.status, "succeeded", result.error?.message);
  assert.equal(result.bag.done, true);
  assert.deepEqual(codes, ["STEP_TIMED_OUT"]);
  assert.equal(node.cancels.length, 1);
  assert.equal(node.cancels[0]?.sessionId, node.started[0]);
  assert.match(node.cancels[0]?.reason ?? "", /custom step check \(step:check\) ran past its timeout of 1s/);
  assert.equal(node.started.length, 2);
  assert.notEqual(node.started[1], node.started[0], "the retry did not re-attach to the cancelled session");
});
