// The operation runner against a scripted sandbox: each scratch session is a
// script of harness events, so repair, timeouts bounded by the parent's
// deadline, cancellation, nesting and both crash-recovery cases are
// deterministic. (harness-operations-shipment.test.ts runs the real stack.)
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { create, toJson, type JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import { timestampDate, ValueSchema } from "@bufbuild/protobuf/wkt";
import {
  PermissionRequestSchema,
  RuntimeToolCallSchema,
  SessionEventSchema,
  SessionResultSchema,
  StopReason,
  ToolCallSchema,
  UsageSchema,
  type RuntimeToolResult,
  type SessionEvent,
  type SessionRequest,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { createLogger } from "@oz0/serving";
import type { AgentVersionRecord } from "../src/store/job-store.js";
import { MessageQueue } from "../src/sessions/message-queue.js";
import { OperationRunner, operationRuntimeTools, type OperationParent } from "../src/operations/operation-runner.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import type {
  LifecycleSink,
  SandboxMessage,
  SessionChannel,
  SessionRunner,
  StartSessionOptions,
} from "../src/sessions/session-runner.js";
import { eventually } from "./support/test-stack.js";

const logger = createLogger({ name: "test", level: "silent" });
const homes: string[] = [];
const stores: SqliteJobStore[] = [];
after(async () => {
  for (const store of stores) await store.close();
  homes.forEach((h) => rmSync(h, { recursive: true, force: true }));
});

const shipmentSchema = {
  type: "object",
  properties: { shipmentReference: { type: "string" }, pickupCountry: { type: "string" } },
  required: ["shipmentReference", "pickupCountry"],
  additionalProperties: false,
};

function agentWith(timeoutMs = 60_000): AgentVersionRecord {
  return {
    name: "orchestrator",
    version: 3,
    publishedAt: new Date(),
    contentHash: "sha256:x",
    plugin: "testing",
    pluginVersion: "0.1.0",
    pluginPath: "/plugins/testing",
    instructions: "You orchestrate shipments.",
    definition: {
      name: "orchestrator",
      runtime: "harness:fake",
      model: { primary: "anthropic/claude-test" },
      instructions: "prompts/o.md",
      harness: { tools: ["read_file"] },
      harness_operations: [
        {
          key: "extract_shipment",
          description: "Extract a shipment.",
          instructions: "Read the documents; return the shipment.",
          result_schema: shipmentSchema,
          timeout_ms: timeoutMs,
        },
      ],
    },
    harness: {
      plugin: "testing",
      pluginPath: "/plugins/testing",
      manifest: { name: "fake", command: ["oz0-fake-harness"], permissions: true },
    },
  } as unknown as AgentVersionRecord;
}

type Step = SessionEvent["event"] | { case: "hang" } | { case: "waitFor"; value: Promise<unknown> };

/**
 * A sandbox whose sessions play scripts; `hang` waits until the session is
 * cancelled. With `ignoreCancel` it is a hostile node: a hung session runs on
 * whatever it is asked, and its stream ends only when the orchestrator lets it go.
 */
class ScriptedSandbox implements SessionRunner {
  readonly url = "scripted://sandbox";
  readonly started: StartSessionOptions[] = [];
  readonly cancelled: string[] = [];
  readonly runtimeAnswers: RuntimeToolResult[] = [];
  readonly #cancels = new Map<string, () => void>();
  readonly #onStart: ((n: number) => void)[] = [];

  constructor(
    readonly script: (request: SessionRequest, n: number) => Step[],
    readonly options: { ignoreCancel?: boolean } = {},
  ) {}

  /** Resolves when the n-th session (from 1) has started. */
  startedNth(n: number): Promise<void> {
    if (this.started.length >= n) return Promise.resolve();
    return new Promise((resolve) => this.#onStart.push((count) => count >= n && resolve()));
  }

  start(options: StartSessionOptions): SessionChannel {
    this.started.push(options);
    const n = this.started.length;
    this.#onStart.forEach((f) => f(n));
    const queue = new MessageQueue<SandboxMessage>();
    const sessionId = options.request.sessionId;
    let seq = 0;
    let cancelled = false;
    let wakeCancel: () => void = () => undefined;
    this.#cancels.set(sessionId, () => {
      cancelled = true;
      wakeCancel();
    });
    const play = async (): Promise<void> => {
      queue.push({ seq: ++seq, kind: "started", sessionId });
      for (const step of this.script(options.request, n)) {
        if (cancelled) break;
        if (step.case === "hang") {
          await new Promise<void>((resolve) => (wakeCancel = resolve));
          break;
        }
        if (step.case === "waitFor") {
          await step.value;
          continue;
        }
        queue.push({ seq: ++seq, kind: "event", event: create(SessionEventSchema, { event: step } as never) });
        await new Promise((r) => setImmediate(r));
      }
      if (cancelled)
        queue.push({
          seq: ++seq,
          kind: "event",
          event: create(SessionEventSchema, { event: { case: "result", value: { stopReason: StopReason.CANCELLED } } }),
        });
      queue.push({ seq: ++seq, kind: "exited", exitCode: 0, signal: "", error: "" });
      queue.end();
    };
    void play();
    return {
      [Symbol.asyncIterator]: () => queue[Symbol.asyncIterator](),
      answerPermission: async () => undefined,
      answerRuntimeTool: async (result) => {
        this.runtimeAnswers.push(result);
      },
      close: () => queue.end(),
    };
  }

  reattach(): SessionChannel {
    throw new Error("not used");
  }

  async cancel(options: { sessionId: string }): Promise<void> {
    this.cancelled.push(options.sessionId);
    if (!this.options.ignoreCancel) this.#cancels.get(options.sessionId)?.();
  }
}

const usage = (): Step => ({
  case: "usage",
  value: create(UsageSchema, { model: "claude-test", inputTokens: 100n, outputTokens: 20n }),
});
const readStep = (p: string): Step[] => [
  usage(),
  { case: "toolCall", value: create(ToolCallSchema, { callId: "t1", tool: "read_file", input: { path: p } }) },
  {
    case: "permissionRequest",
    value: create(PermissionRequestSchema, { id: "p1", tool: "read_file", callId: "t1", input: { path: p } }),
  },
];
const finish = (output: unknown): Step[] => [
  usage(),
  {
    case: "result",
    value: create(SessionResultSchema, {
      stopReason: StopReason.COMPLETED,
      text: JSON.stringify(output),
      structuredOutput: output as ProtoJsonObject,
    }),
  },
];

interface Published {
  type: string;
  init: Parameters<LifecycleSink["publish"]>[1];
}

function setup(options: {
  sandbox: ScriptedSandbox;
  home?: string;
  maxRepairs?: number;
  maxPerJob?: number;
  stopWaitMs?: number;
  deadline?: Date;
  agent?: AgentVersionRecord;
  answer?: (r: RuntimeToolResult) => Promise<void>;
}) {
  const home = options.home ?? mkdtempSync(path.join(os.tmpdir(), "oz0-ops-"));
  homes.push(home);
  // A new store on the same file is what a restarted orchestrator opens.
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  stores.push(store);
  const events: Published[] = [];
  const answers: RuntimeToolResult[] = [];
  const revoked: string[] = [];
  const runner = new OperationRunner({
    store,
    logger,
    policy: new PermissionPolicy(),
    lifecycle: {
      event: () => undefined,
      committed: () => undefined,
      publish: (type, init) => void events.push({ type, init }),
      close: async () => undefined,
    },
    tokens: {
      mint: async (o) => ({
        token: `tok-${o.sessionId}`,
        tokenId: `tid-${o.sessionId}`,
        anthropicBaseUrl: "http://llm",
        openaiBaseUrl: "http://llm/v1",
        headers: {},
      }),
      revoke: async (o) => {
        revoked.push(o.tokenId);
        return { neverUsed: false };
      },
    },
    ...(options.maxRepairs !== undefined ? { maxRepairs: options.maxRepairs } : {}),
    ...(options.maxPerJob !== undefined ? { maxPerJob: options.maxPerJob } : {}),
    ...(options.stopWaitMs !== undefined ? { stopWaitMs: options.stopWaitMs } : {}),
  });
  const brokenRules: string[] = [];
  const parent: OperationParent = {
    jobId: "job_1",
    sessionId: "ses_parent",
    agent: options.agent ?? agentWith(),
    sandbox: options.sandbox,
    ...(options.deadline ? { deadline: options.deadline } : {}),
    answer:
      options.answer ??
      (async (r) => {
        answers.push(r);
      }),
    brokeRule: async (rule) => {
      brokenRules.push(rule);
    },
  };
  return { home, store, runner, parent, events, answers, revoked, brokenRules };
}

void test("offers each operation as a runtime tool taking { task }", () => {
  const [tool] = operationRuntimeTools(agentWith());
  assert.equal(tool?.name, "extract_shipment");
  assert.deepEqual((tool?.inputSchema as { required: string[] }).required, ["task"]);
});

void test("a validated result goes back to the parent, from a scratch session in the parent's working directory; events carry no task or result", async () => {
  const sandbox = new ScriptedSandbox(() => [
    ...readStep("booking.txt"),
    ...finish({ shipmentReference: "4831", pickupCountry: "DE" }),
  ]);
  const { runner, parent, events, answers, revoked } = setup({ sandbox });
  await runner.accept({
    parent,
    callId: "rt-1",
    name: "extract_shipment",
    input: { task: "Extract order 4831 SECRET-TASK" },
  }).done;
  assert.deepEqual(
    answers.map((a) => [a.id, a.isError, a.output && toJson(ValueSchema, a.output)]),
    [["rt-1", false, { shipmentReference: "4831", pickupCountry: "DE" }]],
  );
  const start = sandbox.started[0]!;
  assert.equal(start.shareWorkingDirOf, "ses_parent");
  assert.deepEqual(start.attachments, []);
  assert.equal(start.request.runtimeTools.length, 0, "scratch sessions get no operation tools");
  assert.deepEqual(start.request.outputSchema, shipmentSchema);
  assert.match(
    start.request.instructions,
    /^You orchestrate shipments\.\n\n## Harness operation: extract_shipment\n\nRead the documents/,
  );
  assert.equal(start.request.input, "Extract order 4831 SECRET-TASK");
  assert.equal(start.request.model?.primary, "anthropic/claude-test");
  assert.deepEqual(revoked, [`tid-${start.request.sessionId}`]);
  assert.deepEqual(
    events.map((e) => e.type),
    [
      "harness.operation_started",
      "harness.operation_step",
      "harness.operation_step",
      "harness.operation_step",
      "harness.operation_completed",
    ],
  );
  assert.ok(events.every((e) => e.init.toolCallId === "rt-1" && e.init.operationInvocationId?.startsWith("opi_")));
  assert.deepEqual(events[0]!.init.attributes, {
    operation_key: "extract_shipment",
    task_chars: 30,
    timeout_ms: 60_000,
  });
  assert.deepEqual(
    events.slice(1, 4).map((e) => e.init.attributes),
    [
      {
        step_index: 1,
        step_kind: "model",
        duration_ms: events[1]!.init.attributes!.duration_ms,
        requested_tool: "read_file",
      },
      { step_index: 2, step_kind: "tool", tool_name: "read_file", path: "booking.txt" },
      { step_index: 3, step_kind: "model", duration_ms: events[3]!.init.attributes!.duration_ms, finish: true },
    ],
  );
  assert.equal(events[4]!.init.attributes!.result_validation, "valid");
  assert.deepEqual(events[4]!.init.tokens, { inputTokens: 200, outputTokens: 40 });
  const serialized = JSON.stringify(events);
  assert.ok(!serialized.includes("SECRET-TASK") && !serialized.includes('4831"'), "no task or result in events");
});

void test("an invalid result is repaired with the validator's errors, then fails through the tool error path after the bound", async () => {
  const repaired = new ScriptedSandbox((_, n) =>
    n === 1 ? finish({ shipmentReference: 4831 }) : finish({ shipmentReference: "4831", pickupCountry: "DE" }),
  );
  const one = setup({ sandbox: repaired });
  await one.runner.accept({
    parent: one.parent,
    callId: "rt-1",
    name: "extract_shipment",
    input: { task: "Extract 4831" },
  }).done;
  assert.equal(repaired.started.length, 2);
  assert.match(
    repaired.started[1]!.request.input,
    /^Extract 4831\n\nA previous attempt's result did not validate[\s\S]*- \/ must have required property 'pickupCountry'\n- \/shipmentReference must be string\n/,
  );
  assert.equal(one.answers[0]!.isError, false);

  const never = new ScriptedSandbox(() => finish({ wrong: true }));
  const two = setup({ sandbox: never, maxRepairs: 2 });
  await two.runner.accept({
    parent: two.parent,
    callId: "rt-2",
    name: "extract_shipment",
    input: { task: "Extract 4831" },
  }).done;
  assert.equal(never.started.length, 3, "one attempt and two repairs");
  assert.equal(two.answers[0]!.isError, true);
  assert.equal(two.answers[0]!.output, undefined);
  assert.match(
    two.answers[0]!.error,
    /^operation_result_invalid: extract_shipment returned no result valid against its result_schema after 2 repair attempt\(s\)/,
  );
  const failed = two.events.find((e) => e.type === "harness.operation_failed")!;
  assert.deepEqual(
    [failed.init.attributes!.result_validation, failed.init.attributes!.error_code],
    ["invalid", "operation_result_invalid"],
  );
});

void test("a result holding a number JSON cannot write (1e400 read as Infinity) is repaired, never handed on", async () => {
  // Typed or not: an untyped member let Infinity through, and it reached the parent as null after a restart.
  const agent = agentWith();
  const operation = (agent.definition as unknown as { harness_operations: { result_schema: unknown }[] })
    .harness_operations[0]!;
  operation.result_schema = {
    type: "object",
    properties: { weight: { type: "number" }, note: {} },
    required: ["weight"],
    additionalProperties: false,
  };
  const sandbox = new ScriptedSandbox((_, n) =>
    n === 1
      ? finish({ weight: 2, note: { at: [1, Number.POSITIVE_INFINITY] } })
      : n === 2
        ? finish({ weight: Number.POSITIVE_INFINITY })
        : finish({ weight: 2, note: "kg" }),
  );
  const o = setup({ sandbox, agent });
  await extract(o, "rt-1").done;
  assert.equal(sandbox.started.length, 3);
  assert.match(
    sandbox.started[1]!.request.input,
    /- \/note\/at\/1 is not a finite number; JSON has no Infinity or NaN\n/,
  );
  assert.match(sandbox.started[2]!.request.input, /- \/weight is not a finite number/);
  assert.equal(o.answers[0]!.isError, false);
  assert.deepEqual(toJson(ValueSchema, o.answers[0]!.output!), { weight: 2, note: "kg" });
});

void test("a version published with a pattern RE2 cannot match is answered with why, running no session", async () => {
  // Publication refuses lookaround now; a version published before still exists and may be called.
  const agent = agentWith();
  const operation = (agent.definition as unknown as { harness_operations: { result_schema: unknown }[] })
    .harness_operations[0]!;
  operation.result_schema = { type: "object", properties: { id: { type: "string", pattern: "^(?!x)" } } };
  const sandbox = new ScriptedSandbox(() => finish({ id: "a" }));
  const o = setup({ sandbox, agent });
  await extract(o, "rt-1").done;
  assert.equal(sandbox.started.length, 0);
  assert.equal(o.answers[0]!.isError, true);
  assert.match(
    o.answers[0]!.error,
    /^operation_result_invalid: extract_shipment: result_schema does not compile .*\(\?!.* publish a new version of orchestrator$/,
  );
});

void test("the timeout is bounded by what is left of the parent's deadline", async () => {
  const sandbox = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const deadline = new Date(Date.now() + 1_500);
  const { runner, parent, events, answers } = setup({ sandbox, deadline, agent: agentWith(300_000) });
  await runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } }).done;
  const scratchDeadline = timestampDate(sandbox.started[0]!.request.limits!.deadline!);
  assert.ok(
    scratchDeadline.getTime() <= deadline.getTime(),
    "the scratch session's deadline is the parent's, not 300 s away",
  );
  assert.deepEqual(sandbox.cancelled, [sandbox.started[0]!.request.sessionId]);
  assert.match(answers[0]!.error, /^operation_timed_out: /);
  const started = events.find((e) => e.type === "harness.operation_started")!;
  assert.ok((started.init.attributes!.timeout_ms as number) <= 1_500);
  assert.equal(events.at(-1)!.type, "harness.operation_timed_out");

  const late = setup({ sandbox: new ScriptedSandbox(() => []), deadline: new Date(Date.now() - 1) });
  await late.runner.accept({ parent: late.parent, callId: "rt-2", name: "extract_shipment", input: { task: "t" } })
    .done;
  assert.match(late.answers[0]!.error, /^operation_deadline_passed: /);
});

void test("cancelling the parent cancels its running operations", async () => {
  const sandbox = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const { runner, parent, events, answers } = setup({ sandbox });
  const { done } = runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } });
  await sandbox.startedNth(1);
  runner.cancelJob("job_1");
  await done;
  assert.deepEqual(sandbox.cancelled, [sandbox.started[0]!.request.sessionId]);
  assert.match(answers[0]!.error, /^operation_cancelled: /);
  assert.equal(events.at(-1)!.type, "harness.operation_cancelled");
});

/** One call of the operation, with a task that does not matter to the test. */
function extract(o: ReturnType<typeof setup>, callId: string): ReturnType<OperationRunner["accept"]> {
  return o.runner.accept({ parent: o.parent, callId, name: "extract_shipment", input: { task: "t" } });
}

void test("a call whose record cannot be written is not answered, and runs once when delivered again", async () => {
  // Answered "try again", the call ran twice when the parent's seq could not be written either: the replay of
  // the call ran it, and so did the harness calling again.
  const sandbox = new ScriptedSandbox(() => finish({ shipmentReference: "7", pickupCountry: "NL" }));
  const o = setup({ sandbox });
  const put = o.store.putOperationCheckpoint.bind(o.store);
  o.store.putOperationCheckpoint = () => Promise.reject(new Error("Connection terminated unexpectedly"));
  const first = extract(o, "rt-1");
  await assert.rejects(first.recorded, /Connection terminated unexpectedly/);
  await first.done;
  assert.equal(o.answers.length, 0, "nothing answered: the caller leaves the seq before the call");
  assert.equal(sandbox.started.length, 0, "nothing ran");

  o.store.putOperationCheckpoint = put;
  const again = extract(o, "rt-1");
  await again.recorded;
  await again.done;
  assert.equal(sandbox.started.length, 1, "ran once");
  assert.deepEqual(
    o.answers.map((a) => [a.id, a.isError]),
    [["rt-1", false]],
  );
});

void test("a scratch session its node will not stop: the operation still ends, timed out or cancelled, and its token is revoked", async () => {
  const sandbox = new ScriptedSandbox(() => [usage(), { case: "hang" }], { ignoreCancel: true });
  const timedOut = setup({ sandbox, deadline: new Date(Date.now() + 300), stopWaitMs: 200 });
  await extract(timedOut, "rt-1").done;
  const first = sandbox.started[0]!.request.sessionId;
  assert.deepEqual(sandbox.cancelled, [first], "the node was asked once");
  assert.match(timedOut.answers[0]!.error, /^operation_timed_out: /);
  assert.deepEqual(timedOut.revoked, [`tid-${first}`]);

  const cancelled = setup({ sandbox, stopWaitMs: 200 });
  const { done } = extract(cancelled, "rt-2");
  await sandbox.startedNth(2);
  cancelled.runner.cancelJob("job_1");
  await done;
  assert.match(cancelled.answers[0]!.error, /^operation_cancelled: /);
  assert.deepEqual(cancelled.revoked, [`tid-${sandbox.started[1]!.request.sessionId}`]);
});

void test("a job abandoned to another replica: its running operations stop and record nothing more", async () => {
  // The new owner resumes them from the checkpoint; a "cancelled" record written now would land on its job.
  const sandbox = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const { runner, parent, events, answers } = setup({ sandbox });
  const { recorded, done } = runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } });
  await recorded;
  await sandbox.startedNth(1);
  runner.abandonJob("job_1");
  await done;
  assert.deepEqual(answers, [], "nothing is answered for a job this replica no longer runs");
  assert.deepEqual(
    events.filter((e) => /_(completed|failed|cancelled|timed_out)$/.test(e.type)),
    [],
    "no end event: the new owner reports the end",
  );
  const record = await runner.checkpoints.get("job_1", "rt-1");
  assert.equal(record?.status, "running", "the checkpoint is left for the new owner to resume");
  assert.equal(record?.delivered, false);
});

void test("a job abandoned and taken back mid-operation: the first run's end does not let go of the second", async () => {
  // The lease lost, then won back: the call is delivered again and runs again. When the abandoned run then ended,
  // it let go of the call under the second run, and a third delivery started a third run beside it.
  const sandbox = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const o = setup({ sandbox });
  const first = extract(o, "rt-1");
  await first.recorded;
  await sandbox.startedNth(1);
  o.runner.abandonJob("job_1");
  const second = extract(o, "rt-1");
  await first.done;
  await second.recorded;
  await sandbox.startedNth(2);
  const third = extract(o, "rt-1");
  const settled = await Promise.race([
    third.done.then(() => "settled"),
    new Promise((resolve) => setImmediate(() => resolve("still running"))),
  ]);
  assert.equal(settled, "settled", "the third delivery is the second run's, which is still in flight");
  o.runner.cancelJob("job_1");
  await second.done;
  assert.equal(sandbox.started.length, 2, "two runs: the abandoned one and the one after the lease came back");
});

void test("a nested operation call from a scratch session is refused; bad task input is refused", async () => {
  const sandbox = new ScriptedSandbox(() => [
    usage(),
    {
      case: "runtimeToolCall",
      value: create(RuntimeToolCallSchema, { id: "rt-inner", name: "extract_shipment", input: { task: "again" } }),
    },
    ...finish({ shipmentReference: "1", pickupCountry: "FR" }),
  ]);
  const { runner, parent, answers } = setup({ sandbox });
  await runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } }).done;
  assert.deepEqual(
    sandbox.runtimeAnswers.map((a) => [a.id, a.isError]),
    [["rt-inner", true]],
  );
  assert.match(sandbox.runtimeAnswers[0]!.error, /harness operations cannot be nested/);
  assert.equal(answers[0]!.isError, false, "the outer operation still completes");

  await runner.accept({ parent, callId: "rt-2", name: "extract_shipment", input: { task: "" } }).done;
  assert.match(
    answers[1]!.error,
    /^operation_input_invalid: extract_shipment: invalid input: task must be 1–100,000 characters/,
  );
});

void test("operations called in one turn run concurrently", async () => {
  let secondStarted!: () => void;
  const both = new Promise<void>((resolve) => (secondStarted = resolve));
  // The first scratch session cannot finish until the second has started: run one after the other, this test never ends.
  const sandbox = new ScriptedSandbox((_, n) => {
    if (n === 2) secondStarted();
    return n === 1
      ? [{ case: "waitFor", value: both }, ...finish({ shipmentReference: "1", pickupCountry: "DE" })]
      : finish({ shipmentReference: "2", pickupCountry: "FR" });
  });
  const { runner, parent, answers } = setup({ sandbox });
  await Promise.all([
    runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "a" } }).done,
    runner.accept({ parent, callId: "rt-2", name: "extract_shipment", input: { task: "b" } }).done,
  ]);
  assert.deepEqual(answers.map((a) => a.id).sort(), ["rt-1", "rt-2"]);
});

/**
 * A sandbox whose sessions each wait until released (in the order they started), then finish with a
 * result; `peak()` is the most that ran at once.
 */
function heldSessions(): { sandbox: ScriptedSandbox; releases: (() => void)[]; peak: () => number } {
  const releases: (() => void)[] = [];
  let running = 0;
  let most = 0;
  const sandbox = new ScriptedSandbox(() => {
    running++;
    most = Math.max(most, running);
    const released = new Promise<void>((resolve) => releases.push(resolve)).then(() => void running--);
    return [{ case: "waitFor", value: released }, ...finish({ shipmentReference: "1", pickupCountry: "DE" })];
  });
  return { sandbox, releases, peak: () => most };
}

void test("a job runs at most maxPerJob operations at once; later calls wait their turn, and a cancel ends them without a session", async () => {
  // Scratch sessions are never placed: without the bound, a model's 40 calls in one turn were 40 sessions on its node.
  const { sandbox, releases, peak } = heldSessions();
  const o = setup({ sandbox, maxPerJob: 2 });
  const first = Array.from({ length: 5 }, (_, i) => extract(o, `rt-${i}`));
  await sandbox.startedNth(2);
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(sandbox.started.length, 2, "the third call waits for a slot");
  // Each session that ends lets the next call start, in the order the calls came.
  while (sandbox.started.length < 5 || releases.length > 0) {
    const started = sandbox.started.length;
    releases.shift()?.();
    if (started < 5) await sandbox.startedNth(started + 1);
    else await new Promise((r) => setImmediate(r));
  }
  await Promise.all(first.map((call) => call.done));
  assert.equal(peak(), 2);
  assert.deepEqual(
    o.answers.map((a) => [a.id, a.isError]).sort(),
    [0, 1, 2, 3, 4].map((i) => [`rt-${i}`, false]),
  );
  assert.deepEqual(
    sandbox.started.map((start) => start.request.input),
    ["t", "t", "t", "t", "t"],
  );

  // Waiting calls of a cancelled job start no session.
  const hung = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const h = setup({ sandbox: hung, maxPerJob: 1 });
  const calls = [extract(h, "rt-a"), extract(h, "rt-b"), extract(h, "rt-c")];
  await hung.startedNth(1);
  h.runner.cancelJob("job_1");
  await Promise.all(calls.map((call) => call.done));
  assert.equal(hung.started.length, 1);
  assert.deepEqual(
    h.answers.map((a) => a.error.split(":")[0]),
    ["operation_cancelled", "operation_cancelled", "operation_cancelled"],
  );
});

void test("a slot handed to a waiting call stays counted: a call that comes while it runs waits", async () => {
  const { sandbox, releases, peak } = heldSessions();
  const o = setup({ sandbox, maxPerJob: 1 });
  const a = extract(o, "rt-a");
  const b = extract(o, "rt-b");
  await sandbox.startedNth(1);
  releases.shift()!();
  await a.done;
  await sandbox.startedNth(2);
  // b runs in the slot a handed over; c must wait for it.
  const c = extract(o, "rt-c");
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(sandbox.started.length, 2, "c started beside b");
  releases.shift()!();
  await b.done;
  await sandbox.startedNth(3);
  releases.shift()!();
  await c.done;
  assert.equal(peak(), 1);
});

void test("a call id the job already used for another operation is refused, not answered with that operation's result", async () => {
  const agent = agentWith();
  const operations = (agent.definition as { harness_operations: Record<string, unknown>[] }).harness_operations;
  operations.push({ ...operations[0], key: "approve_shipment" });
  const sandbox = new ScriptedSandbox(() => finish({ shipmentReference: "1", pickupCountry: "DE" }));
  const { runner, parent, answers } = setup({ sandbox, agent });
  await runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } }).done;
  await runner.accept({ parent, callId: "rt-1", name: "approve_shipment", input: { task: "approve it?" } }).done;
  assert.equal(answers[0]!.isError, false);
  assert.match(
    answers[1]!.error,
    /^operation_input_invalid: approve_shipment: call id rt-1 of this job was used for operation extract_shipment already/,
  );
  // The same operation under the same id with another task is another call too.
  await runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "another" } }).done;
  assert.match(
    answers[2]!.error,
    /^operation_input_invalid: extract_shipment: call id rt-1 of this job was used for a call of this operation with another task already/,
  );
  assert.equal(sandbox.started.length, 1);
});

void test("crash after the checkpoint: the recorded result is reused, not asked again", async () => {
  const first = new ScriptedSandbox(() => finish({ shipmentReference: "4831", pickupCountry: "DE" }));
  // The parent's stream is gone when the answer is ready (the orchestrator is going down).
  const crashed = setup({
    sandbox: first,
    answer: async () => Promise.reject(new Error("the job's session is not attached")),
  });
  await crashed.runner.accept({
    parent: crashed.parent,
    callId: "rt-1",
    name: "extract_shipment",
    input: { task: "t" },
  }).done;
  assert.equal((await crashed.runner.checkpoints.get("job_1", "rt-1"))?.status, "validated");

  const second = new ScriptedSandbox(() => assert.fail("the operation ran again"));
  const restarted = setup({ sandbox: second, home: crashed.home });
  await restarted.runner.resumeJob(restarted.parent);
  assert.equal(second.started.length, 0);
  assert.deepEqual(
    restarted.answers.map((a) => [a.id, a.output && toJson(ValueSchema, a.output)]),
    [["rt-1", { shipmentReference: "4831", pickupCountry: "DE" }]],
  );
  assert.equal((await restarted.runner.checkpoints.get("job_1", "rt-1"))?.delivered, true);
  assert.deepEqual(await restarted.runner.checkpoints.undelivered("job_1"), [], "nothing left to resume");
});

void test("a result handed to a stream that then broke is sent again at the re-attach, without running again", async () => {
  // "Delivered" only means handed to the stream: the re-attach cannot know the harness got it, so it sends it again.
  const sandbox = new ScriptedSandbox(() => finish({ shipmentReference: "4832", pickupCountry: "FR" }));
  const { runner, parent, answers } = setup({ sandbox });
  await runner.accept({ parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } }).done;
  assert.equal((await runner.checkpoints.get("job_1", "rt-1"))?.delivered, true);
  await runner.resumeJob(parent);
  assert.equal(sandbox.started.length, 1, "not run again");
  assert.deepEqual(
    answers.map((a) => [a.id, a.output && toJson(ValueSchema, a.output)]),
    [
      ["rt-1", { shipmentReference: "4832", pickupCountry: "FR" }],
      ["rt-1", { shipmentReference: "4832", pickupCountry: "FR" }],
    ],
  );
});

void test("crash before the checkpoint: the operation runs again", async () => {
  const first = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const crashed = setup({ sandbox: first });
  // The orchestrator dies while the scratch session works: its promise is simply abandoned.
  void crashed.runner.accept({ parent: crashed.parent, callId: "rt-1", name: "extract_shipment", input: { task: "t" } })
    .done;
  await first.startedNth(1);
  const leftover = first.started[0]!.request.sessionId;
  await eventually(async () =>
    (await crashed.runner.checkpoints.get("job_1", "rt-1"))?.scratchSessionIds.includes(leftover) ? true : undefined,
  );
  assert.equal((await crashed.runner.checkpoints.get("job_1", "rt-1"))?.status, "running");

  const second = new ScriptedSandbox(() => finish({ shipmentReference: "4831", pickupCountry: "DE" }));
  const restarted = setup({ sandbox: second, home: crashed.home });
  await restarted.runner.resumeJob(restarted.parent);
  assert.deepEqual(second.cancelled, [leftover], "the previous attempt's scratch session is cancelled");
  assert.equal(second.started.length, 1);
  assert.equal(second.started[0]!.request.input, "t");
  assert.equal(restarted.answers[0]!.isError, false);
  first.cancel({ sessionId: leftover }).catch(() => undefined);
});

void test("crash before the checkpoint, of a job that ends already: the leftover scratch session is stopped, and the call answered cancelled", async () => {
  // A job cancelled or failed before the restart: its operations are cancelled before they are resumed, so the
  // resume runs nothing, yet still stops what the previous process left running on the node.
  const first = new ScriptedSandbox(() => [usage(), { case: "hang" }]);
  const crashed = setup({ sandbox: first });
  void extract(crashed, "rt-1").done;
  await first.startedNth(1);
  const leftover = first.started[0]!.request.sessionId;
  await eventually(async () =>
    (await crashed.runner.checkpoints.get("job_1", "rt-1"))?.scratchSessionIds.includes(leftover) ? true : undefined,
  );

  const second = new ScriptedSandbox(() => assert.fail("the operation ran again"));
  const restarted = setup({ sandbox: second, home: crashed.home });
  restarted.runner.cancelJob("job_1");
  await restarted.runner.resumeJob(restarted.parent);
  assert.deepEqual(second.cancelled, [leftover], "the previous attempt's scratch session is stopped");
  assert.equal(second.started.length, 0, "nothing runs");
  assert.match(restarted.answers[0]!.error, /^operation_cancelled: /);
  assert.equal((await restarted.runner.checkpoints.get("job_1", "rt-1"))?.delivered, true, "and recorded so");
  // The first process published its start; the second publishes only its end.
  assert.deepEqual(
    crashed.events.map((e) => e.type),
    ["harness.operation_started"],
  );
  assert.deepEqual(
    restarted.events.map((e) => [e.type, e.init.operationInvocationId]),
    [["harness.operation_cancelled", crashed.events[0]!.init.operationInvocationId]],
  );
  first.cancel({ sessionId: leftover }).catch(() => undefined);
});

void test("a call that comes after its job's operations were cancelled runs nothing", async () => {
  // The job's cancel reached the runner first; a call replayed or delivered after it must not start afresh.
  const sandbox = new ScriptedSandbox(() => assert.fail("an operation ran after its job was cancelled"));
  const o = setup({ sandbox });
  o.runner.cancelJob("job_1");
  await extract(o, "rt-1").done;
  assert.equal(sandbox.started.length, 0);
  assert.match(o.answers[0]!.error, /^operation_cancelled: /);
  // Ended: a call resumed or delivered after the end, by a re-attach that was under way, runs nothing either.
  o.runner.forgetJob("job_1");
  await extract(o, "rt-2").done;
  await o.runner.resumeJob(o.parent);
  assert.equal(sandbox.started.length, 0);
  // (The resume sends the recorded answers again, as it does at every re-attach.)
  assert.deepEqual(
    new Set(o.answers.map((a) => `${a.id} ${a.error.split(":")[0]}`)),
    new Set(["rt-1 operation_cancelled", "rt-2 operation_cancelled"]),
  );
});
