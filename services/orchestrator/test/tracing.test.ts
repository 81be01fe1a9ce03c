// The orchestrator's tracing decorators in process, with spans in memory: the
// parts the end-to-end test does not reach — a harness operation's runtime
// tool call with its scratch session nested below it, graph runs and their
// step spans (without the step's error message), and the traceparent each
// lifecycle event gets. A marker planted in every piece of content must not
// appear on any span.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { context, trace, type SpanContext } from "@opentelemetry/api";
import type { ReadableSpan } from "@opentelemetry/sdk-trace-base";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "@oz0/proto/grpc/health/v1/health_pb";
import {
  PermissionAnswerSchema,
  RuntimeToolResultSchema,
  SessionEventSchema,
  SessionRequestSchema,
} from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxNodeService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import {
  CONTENT_ATTRIBUTES,
  startInMemoryTelemetry,
  traceContextClientInterceptor,
  type InMemoryTelemetry,
} from "@oz0/serving";
import type {
  LifecycleInit,
  LifecycleSink,
  SandboxMessage,
  SessionChannel,
  SessionRunner,
  StartSessionOptions,
} from "../src/sessions/session-runner.js";
import { startNodeListener } from "../src/rpc/sandbox-node-service.js";
import { OrchestratorTracing } from "../src/tracing.js";

const MARKER = "PLANTED-CONTENT-MARKER-91b2";

let telemetry: InMemoryTelemetry;
before(() => {
  telemetry = startInMemoryTelemetry({ serviceName: "oz0-orchestrator" });
});
after(() => telemetry.shutdown());

const event = (value: MessageInitShape<typeof SessionEventSchema>["event"]): SandboxMessage => ({
  seq: 0,
  kind: "event",
  event: create(SessionEventSchema, { event: value }),
});

/** A sandbox whose sessions replay scripted messages; records the requests it got. */
function fakeRunner(scripts: Record<string, SandboxMessage[]>): SessionRunner & { started: StartSessionOptions[] } {
  const started: StartSessionOptions[] = [];
  return {
    url: "http://sandbox.test",
    started,
    start(options) {
      started.push(options);
      const messages = scripts[options.request.sessionId] ?? [];
      const channel: SessionChannel = {
        async *[Symbol.asyncIterator]() {
          yield* messages;
        },
        answerPermission: async () => {},
        answerRuntimeTool: async () => {},
        close: () => {},
      };
      return channel;
    },
    reattach: () => {
      throw new Error("not used");
    },
    cancel: async () => {},
  };
}

function recordingSink(): LifecycleSink & { events: { type: string; traceparent?: string; toolCallId?: string }[] } {
  const events: { type: string; traceparent?: string; toolCallId?: string }[] = [];
  const record = (type: string, init: LifecycleInit): void => {
    events.push({
      type,
      ...(init.traceparent ? { traceparent: init.traceparent } : {}),
      ...(init.toolCallId ? { toolCallId: init.toolCallId } : {}),
    });
  };
  return {
    events,
    // Events stored with a job change and events stored on their own are stamped alike.
    event: (type, init) => {
      record(type, init);
      return undefined;
    },
    committed: () => undefined,
    publish: record,
    close: async () => {},
  };
}

const request = (sessionId: string, jobId: string) =>
  create(SessionRequestSchema, {
    sessionId,
    jobId,
    agent: { name: "coder", version: 1 },
    input: `task ${MARKER}`,
    instructions: `system ${MARKER}`,
  });

function byName(name: string): ReadableSpan {
  const found = telemetry.spans().filter((s) => s.name === name);
  assert.equal(
    found.length,
    1,
    `${name}: ${telemetry
      .spans()
      .map((s) => s.name)
      .join(", ")}`,
  );
  return found[0]!;
}

void test("a runtime tool call nests its scratch session; hooks nest below the permission; events carry their span's traceparent", async () => {
  telemetry.reset();
  const tracing = new OrchestratorTracing();
  const runner = fakeRunner({
    ses_parent: [
      event({
        case: "toolCall",
        value: {
          callId: "call_1",
          tool: "run_command",
          input: { command: `echo ${MARKER}` },
          title: `Run echo ${MARKER}`,
        },
      }),
      event({
        case: "permissionRequest",
        value: { id: "perm_1", callId: "call_1", tool: "run_command", input: { command: `echo ${MARKER}` } },
      }),
      event({ case: "runtimeToolCall", value: { id: "rt_1", name: "summarise", input: { task: MARKER } } }),
    ],
    ses_scratch: [{ seq: 1, kind: "exited", exitCode: 0, signal: "", error: "" }],
  });
  const traced = tracing.sessionRunner(runner);
  const sink = recordingSink();
  const lifecycle = tracing.lifecycleSink(sink);
  lifecycle.publish("job.created", {
    jobId: "job_1",
    agentName: "coder",
    agentVersion: "1",
    attributes: { input: MARKER },
  });
  const parent = traced.start({ request: request("ses_parent", "job_1"), command: [], pluginDir: "", attachments: [] });
  assert.match(
    runner.started[0]!.request.trace?.traceparent ?? "",
    /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/,
    "the session's context goes into the request",
  );
  for await (const message of parent) void message;
  lifecycle.publish("tool.called", {
    jobId: "job_1",
    toolCallId: "call_1",
    attributes: { tool_name: "run_command", input: MARKER },
  });
  await tracing.traceHook(
    { sessionId: "ses_parent", permissionId: "perm_1", hook: "guard", source: "agent coder" },
    async () => ({ decision: "allow", reason: MARKER }),
  );
  await parent.answerPermission(create(PermissionAnswerSchema, { id: "perm_1", allow: true, reason: MARKER }));
  // The harness operation's scratch session shares the parent's working directory.
  const scratch = traced.start({
    request: request("ses_scratch", "job_1"),
    command: [],
    pluginDir: "",
    attachments: [],
    shareWorkingDirOf: "ses_parent",
  });
  for await (const message of scratch) void message;
  lifecycle.publish("harness.operation_completed", {
    jobId: "job_1",
    sessionId: "ses_parent",
    toolCallId: "rt_1",
    attributes: { operation_key: "summarise" },
  });
  await parent.answerRuntimeTool(create(RuntimeToolResultSchema, { id: "rt_1", isError: false }));
  parent.close();
  lifecycle.publish("job.completed", { jobId: "job_1", sessionId: "ses_parent", status: "succeeded" });

  const job = byName("invoke_agent coder");
  const sessions = telemetry.spans().filter((s) => s.name === "session coder");
  const parentSession = sessions.find((s) => s.attributes["gen_ai.conversation.id"] === "ses_parent")!;
  const scratchSession = sessions.find((s) => s.attributes["gen_ai.conversation.id"] === "ses_scratch")!;
  const tool = byName("execute_tool run_command");
  const permission = byName("permission run_command");
  const hook = byName("hook guard");
  const operation = byName("execute_tool summarise");
  assert.equal(job.parentSpanContext, undefined, "the job is a root");
  assert.equal(parentSession.parentSpanContext?.spanId, job.spanContext().spanId);
  assert.equal(tool.parentSpanContext?.spanId, parentSession.spanContext().spanId);
  assert.equal(permission.parentSpanContext?.spanId, tool.spanContext().spanId);
  assert.equal(permission.attributes["oz0.permission.allowed"], true);
  assert.equal(hook.parentSpanContext?.spanId, permission.spanContext().spanId);
  assert.equal(hook.attributes["oz0.hook.decision"], "allow");
  assert.equal(operation.parentSpanContext?.spanId, parentSession.spanContext().spanId);
  assert.equal(operation.attributes["oz0.tool.runtime"], true);
  assert.equal(operation.attributes["oz0.operation.key"], "summarise");
  assert.equal(operation.attributes["oz0.operation.outcome"], "completed");
  assert.equal(
    scratchSession.parentSpanContext?.spanId,
    operation.spanContext().spanId,
    "the scratch session nests below its runtime tool call",
  );
  assert.equal(job.attributes["oz0.job.state"], "succeeded");
  for (const span of [job, parentSession, scratchSession, tool, permission, hook, operation])
    assert.equal(span.spanContext().traceId, job.spanContext().traceId);

  // Each lifecycle event carries the traceparent of the innermost span it is about.
  const traceparentOf = (span: ReadableSpan) => `00-${span.spanContext().traceId}-${span.spanContext().spanId}-01`;
  assert.equal(sink.events.find((e) => e.type === "job.created")?.traceparent, traceparentOf(job));
  assert.equal(sink.events.find((e) => e.type === "tool.called")?.traceparent, traceparentOf(tool));
  assert.equal(
    sink.events.find((e) => e.type === "harness.operation_completed")?.traceparent,
    traceparentOf(operation),
  );

  for (const span of telemetry.spans()) {
    for (const key of CONTENT_ATTRIBUTES) assert.equal(span.attributes[key], undefined, `${span.name} has ${key}`);
    assert.ok(
      !JSON.stringify(span.attributes).includes(MARKER),
      `${span.name} carries content: ${JSON.stringify(span.attributes)}`,
    );
  }
});

void test("a graph run is one trace: a span per step attempt, the agent step's job below its step, no step error message", async () => {
  telemetry.reset();
  const tracing = new OrchestratorTracing();
  const lifecycle = tracing.lifecycleSink(undefined);
  lifecycle.publish("graph.run_started", { jobId: "job_g", attributes: { graph_name: "triage", graph_version: "2" } });
  const steps = tracing.graphTracer("job_g");
  const ok = steps.startSpan("graph.step classify", {
    attributes: { "oz0.run_id": "job_g", "oz0.step_path": "classify#0", "oz0.node_id": "classify", "oz0.iteration": 0 },
  });
  // The agent step's job is created while its step runs (graph-executor.ts).
  await tracing.inGraphStep({ runId: "job_g", path: "classify#0" }, async () => {
    await Promise.resolve();
    lifecycle.publish("job.created", { jobId: "job_step", agentName: "classifier", agentVersion: "1" });
  });
  lifecycle.publish("job.completed", { jobId: "job_step", status: "succeeded" });
  ok.end();
  const failed = steps.startSpan("graph.step fix", { attributes: { "oz0.node_id": "fix", "oz0.iteration": 1 } });
  failed.setStatus({ code: 2, message: `the step failed on ${MARKER}` });
  failed.end();
  lifecycle.publish("graph.run_failed", { jobId: "job_g", attributes: { error_code: "step_failed" } });

  const run = byName("invoke_agent triage");
  assert.equal(run.attributes["oz0.graph.name"], "triage");
  assert.equal(run.attributes["oz0.job.state"], "failed");
  const classify = byName("graph.step classify");
  const fix = byName("graph.step fix");
  assert.equal(classify.parentSpanContext?.spanId, run.spanContext().spanId);
  const stepJob = byName("invoke_agent classifier");
  assert.equal(
    stepJob.parentSpanContext?.spanId,
    classify.spanContext().spanId,
    "the step's job is a child of its step",
  );
  assert.equal(stepJob.spanContext().traceId, run.spanContext().traceId);
  assert.equal(fix.parentSpanContext?.spanId, run.spanContext().spanId);
  assert.equal(fix.attributes["oz0.iteration"], 1);
  assert.equal(fix.status.code, 2);
  assert.equal(fix.status.message, "graph_step_failed", "a fixed message: the step's own may quote content");
});

void test("a job resumed by another process continues its stored trace, and calls about any job link its stored root", async () => {
  telemetry.reset();
  // The process that created the job: its root span's traceparent is what the store keeps. It dies
  // (SIGKILL) with the span open, so the span is never exported.
  const first = new OrchestratorTracing();
  const firstSink = first.lifecycleSink(undefined);
  firstSink.publish("job.created", { jobId: "job_r", agentName: "coder", agentVersion: "1" });
  const stored = firstSink.traceparentOf?.("job_r") ?? "";
  const [, traceId, rootSpanId] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(stored) ?? [];
  assert.ok(traceId && rootSpanId, `a traceparent to store: ${stored}`);

  // The process that resumes it: the token minted before is revoked, the session re-attached, a
  // tool call waits for a person and is answered, and the job ends.
  const second = new OrchestratorTracing();
  const sink = recordingSink();
  const lifecycle = second.lifecycleSink(sink);
  const revokedIn: (SpanContext | undefined)[] = [];
  const tokens = second.tokenIssuer({
    mint: () => Promise.reject(new Error("not used")),
    revoke: async () => {
      revokedIn.push(trace.getSpanContext(context.active()));
      return { neverUsed: false };
    },
  });
  const reattachedIn: (SpanContext | undefined)[] = [];
  const runner: SessionRunner = {
    ...fakeRunner({}),
    reattach: () => {
      reattachedIn.push(trace.getSpanContext(context.active()));
      const channel: SessionChannel = {
        async *[Symbol.asyncIterator]() {
          yield event({ case: "toolCall", value: { callId: "call_9", tool: "run_command", input: { m: MARKER } } });
          yield event({ case: "permissionRequest", value: { id: "perm_9", callId: "call_9", tool: "run_command" } });
        },
        answerPermission: async () => {},
        answerRuntimeTool: async () => {},
        close: () => {},
      };
      return channel;
    },
  };
  lifecycle.resumed?.({ id: "job_r", agentName: "coder", sessionId: "ses_r", traceparent: stored, tokenId: "tok_r" });
  const channel = second.sessionRunner(runner).reattach({ sessionId: "ses_r", afterSeq: 4 });
  for await (const message of channel) void message;
  await channel.answerPermission(create(PermissionAnswerSchema, { id: "perm_9", allow: true }));
  lifecycle.publish("job.completed", { jobId: "job_r", status: "succeeded" });
  await tokens.revoke({ tokenId: "tok_r" });

  const session = byName("session coder");
  assert.equal(session.spanContext().traceId, traceId, "the re-attached session is in the job's trace");
  assert.equal(session.parentSpanContext?.spanId, rootSpanId, "below the stored root, a remote parent");
  assert.equal(session.attributes["oz0.session.reattached"], true);
  assert.equal(reattachedIn[0]?.spanId, session.spanContext().spanId, "the RunSession call continues the session");
  assert.equal(byName("permission run_command").spanContext().traceId, traceId);
  assert.deepEqual(
    [revokedIn[0]?.traceId, revokedIn[0]?.spanId],
    [traceId, rootSpanId],
    "the token minted before the restart is revoked below the job's root",
  );
  const completed = sink.events.find((e) => e.type === "job.completed")?.traceparent ?? "";
  assert.equal(completed.split("-")[1], traceId, "job.completed carries the job's trace");
  assert.equal(
    telemetry.spans().filter((s) => s.name.startsWith("invoke_agent")).length,
    0,
    "no second root: the job stays one trace",
  );

  // Calls about a job link its root: from memory while it runs here, else from the store (run
  // elsewhere, ended, or started before a restart); a job stored without one is only named.
  const third = new OrchestratorTracing();
  const store = {
    getJob: async (jobId: string) =>
      jobId === "job_r" ? { traceparent: stored } : jobId === "job_old" ? {} : undefined,
  };
  const call = async (name: string, jobId: string): Promise<ReadableSpan> => {
    await trace.getTracer("test").startActiveSpan(name, async (span) => {
      await third.linkJob(jobId, store);
      span.end();
    });
    return byName(name);
  };
  const approve = await call("AnswerPermission", "job_r");
  assert.deepEqual(
    approve.links.map((l) => [l.context.traceId, l.context.spanId, l.attributes?.["oz0.job.id"]]),
    [[traceId, rootSpanId, "job_r"]],
  );
  assert.notEqual(approve.spanContext().traceId, traceId, "the call keeps a trace of its own");
  const old = await call("CancelJob", "job_old");
  assert.deepEqual(old.links, []);
  assert.equal(old.attributes["oz0.job.id"], "job_old");
});

void test("health checks and node heartbeats leave no span unless their caller sent a trace context", async () => {
  const TOKEN = "node-token-for-the-tracing-test";
  const listener = await startNodeListener({
    registry: { register: async () => ({ placed: 0 }), staleAfterMs: 15_000 } as never,
    nodeToken: TOKEN,
    host: "127.0.0.1",
    port: 0,
  });
  try {
    const transport = createGrpcTransport({ baseUrl: listener.url, interceptors: [traceContextClientInterceptor] });
    const nodes = createClient(SandboxNodeService, transport);
    const health = createClient(Health, transport);
    const beat = () =>
      nodes.heartbeat(
        { nodeId: "node-1", url: "http://127.0.0.1:7701", capacity: 2, running: 0 },
        { headers: { authorization: `Bearer ${TOKEN}` } },
      );
    const rpcSpans = () => telemetry.spans().filter((s) => s.name.includes("/"));
    telemetry.reset();
    await beat();
    await health.check({ service: "liveness" });
    assert.deepEqual(
      rpcSpans().map((s) => s.name),
      [],
      "no lone one-span traces",
    );
    await trace.getTracer("test").startActiveSpan("caller", async (span) => {
      await beat();
      await health.check({ service: "liveness" });
      span.end();
    });
    const caller = byName("caller");
    assert.deepEqual(
      rpcSpans().map((s) => [s.name, s.parentSpanContext?.spanId]),
      [
        ["oz0.orchestrator.v1.SandboxNodeService/Heartbeat", caller.spanContext().spanId],
        ["grpc.health.v1.Health/Check", caller.spanContext().spanId],
      ],
      "a caller's trace is continued",
    );
  } finally {
    await listener.close({ graceMs: 0 });
  }
});

void test("names a harness chose reach a span only as identifiers: no prose, no session token, no megabyte", async () => {
  telemetry.reset();
  const tracing = new OrchestratorTracing();
  // A harness line may be a megabyte: a tool name, a call id or a permission id can be most of one.
  const huge = `x${"y".repeat(1024 * 1024)}`;
  const token = "oz0st_c2Vzc2lvbi10b2tlbi1vZi10aGUtam9i";
  const runner = fakeRunner({
    ses_names: [
      event({ case: "started", value: { harnessName: `fake ${MARKER}` } }),
      event({ case: "toolCall", value: { callId: huge, tool: huge, input: {} } }),
      event({ case: "toolCall", value: { callId: "call_2", tool: token, input: {} } }),
      event({ case: "toolCall", value: { callId: "call_3", tool: `read the file ${MARKER}`, input: {} } }),
      event({ case: "permissionRequest", value: { id: huge, callId: "call_2", tool: huge } }),
      event({ case: "runtimeToolCall", value: { id: token, name: `summarise ${MARKER}`, input: {} } }),
      event({ case: "toolCall", value: { callId: "call_4", tool: "read_file", input: {} } }),
      { seq: 9, kind: "exited", exitCode: 0, signal: "", error: "" },
    ],
  });
  const lifecycle = tracing.lifecycleSink(undefined);
  lifecycle.publish("job.created", { jobId: "job_n", agentName: "coder", agentVersion: "1" });
  const channel = tracing
    .sessionRunner(runner)
    .start({ request: request("ses_names", "job_n"), command: [], pluginDir: "", attachments: [] });
  for await (const message of channel) void message;
  lifecycle.publish("job.completed", { jobId: "job_n", status: "succeeded" });

  const spans = telemetry.spans();
  for (const span of spans) {
    const text = `${span.name} ${JSON.stringify(span.attributes)}`;
    assert.ok(text.length < 4096, `${span.name.slice(0, 40)}… is ${text.length} characters`);
    assert.ok(!text.includes(MARKER), `${span.name} carries content: ${text}`);
    assert.ok(!/oz0st_/i.test(text), `${span.name} carries a session token: ${text}`);
  }
  // The spans are still there, with the names that are names.
  assert.equal(spans.filter((s) => s.name === "execute_tool").length, 4, spans.map((s) => s.name).join(", "));
  assert.equal(byName("execute_tool read_file").attributes["gen_ai.tool.name"], "read_file");
  assert.equal(byName("permission").attributes["oz0.permission.id"], undefined);
});

void test("a custom step's session nests below its graph.step; an agent step's session stays below its own job", async () => {
  telemetry.reset();
  const tracing = new OrchestratorTracing();
  const lifecycle = tracing.lifecycleSink(undefined);
  const runner = tracing.sessionRunner(
    fakeRunner({
      ses_custom: [{ seq: 1, kind: "exited", exitCode: 0, signal: "", error: "" }],
      ses_agent: [{ seq: 1, kind: "exited", exitCode: 0, signal: "", error: "" }],
    }),
  );
  lifecycle.publish("graph.run_started", {
    jobId: "job_g2",
    attributes: { graph_name: "support", graph_version: "1" },
  });
  const steps = tracing.graphTracer("job_g2");
  const parse = steps.startSpan("graph.step step:parse-email", {
    attributes: { "oz0.run_id": "job_g2", "oz0.step_path": "/0", "oz0.node_id": "step:parse-email" },
  });
  // graph-executor.ts starts a custom step's session, a session of the graph job, inside its step.
  const custom = tracing.inGraphStep({ runId: "job_g2", path: "/0" }, () =>
    runner.start({ request: request("ses_custom", "job_g2"), command: [], pluginDir: "", attachments: [] }),
  );
  for await (const message of custom) void message;
  parse.end();
  const triage = steps.startSpan("graph.step agent:email-triage", {
    attributes: { "oz0.run_id": "job_g2", "oz0.step_path": "/1", "oz0.node_id": "agent:email-triage" },
  });
  // An agent step's job is created in its step's span, and the job runner starts its session in that context too.
  const agentSession = tracing.inGraphStep({ runId: "job_g2", path: "/1" }, () => {
    lifecycle.publish("job.created", { jobId: "job_s2", agentName: "email-triage", agentVersion: "1" });
    return runner.start({ request: request("ses_agent", "job_s2"), command: [], pluginDir: "", attachments: [] });
  });
  for await (const message of agentSession) void message;
  lifecycle.publish("job.completed", { jobId: "job_s2", status: "succeeded" });
  triage.end();
  lifecycle.publish("graph.run_completed", { jobId: "job_g2" });

  const sessionOf = (id: string) =>
    telemetry.spans().find((s) => s.name.startsWith("session") && s.attributes["gen_ai.conversation.id"] === id)!;
  const parseSpan = byName("graph.step step:parse-email");
  assert.equal(
    sessionOf("ses_custom").parentSpanContext?.spanId,
    parseSpan.spanContext().spanId,
    "before, the custom step's session hung from the graph run, beside every other step's",
  );
  assert.equal(
    sessionOf("ses_agent").parentSpanContext?.spanId,
    byName("invoke_agent email-triage").spanContext().spanId,
  );
  assert.equal(sessionOf("ses_custom").spanContext().traceId, parseSpan.spanContext().traceId);
});

void test("a graph manager's job is part of the graph run's trace, not a trace of the RPC that started the run", async () => {
  telemetry.reset();
  const tracing = new OrchestratorTracing();
  const lifecycle = tracing.lifecycleSink(undefined);
  // The run's engine works on in the context of the RunAgent call that started it.
  await trace.getTracer("test").startActiveSpan("JobService/RunAgent", async (rpc) => {
    lifecycle.publish("graph.run_started", { jobId: "job_g3", attributes: { graph_name: "managed" } });
    rpc.end();
    // A step failed: the manager's job is created (graph-manager-agent.ts) while the RPC's context is still active.
    await tracing.inGraphRun("job_g3", async () => {
      await Promise.resolve();
      lifecycle.publish("job.created", { jobId: "job_boss", agentName: "boss", agentVersion: "1" });
    });
  });
  lifecycle.publish("job.completed", { jobId: "job_boss", status: "succeeded" });
  lifecycle.publish("graph.run_completed", { jobId: "job_g3" });
  const run = byName("invoke_agent managed");
  const boss = byName("invoke_agent boss");
  assert.equal(boss.spanContext().traceId, run.spanContext().traceId, "one trace for the run and its decisions");
  assert.equal(boss.parentSpanContext?.spanId, run.spanContext().spanId);
  // A job created in the RPC's context alone keeps the old rule: a root of its own, linking the caller.
  await trace.getTracer("test").startActiveSpan("JobService/RunAgent", async (rpc) => {
    lifecycle.publish("job.created", { jobId: "job_plain", agentName: "plain", agentVersion: "1" });
    rpc.end();
  });
  lifecycle.publish("job.completed", { jobId: "job_plain", status: "succeeded" });
  assert.equal(byName("invoke_agent plain").parentSpanContext, undefined);
});
