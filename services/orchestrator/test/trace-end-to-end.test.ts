// Issue 11's acceptance: one job on the real stack (the four services as
// processes, the fake harness under the sandbox, the scripted model behind the
// LLM proxy) is ONE OpenTelemetry trace. Every service exports over OTLP/HTTP
// to one receiver, itself a separate process on loopback, and the test reads
// the trace back from it: the span tree across services and into the harness,
// the GenAI names and attributes, the metrics, and no content anywhere (a
// marker planted in the task, the tool input and output and the model's text).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { CONTENT_ATTRIBUTES } from "@oz0/serving";
import {
  startOtlpReceiverProcess,
  type OtlpReceiverProcess,
  type ReceivedSpan,
} from "./support/otlp-receiver-process.js";
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

const MARKER = "PLANTED-CONTENT-MARKER-5c1e";

const FAILING_TASK = "a command that fails, then one nobody answers";

let receiver: OtlpReceiverProcess;
let t: TestStack | undefined;

before(async () => {
  receiver = await startOtlpReceiverProcess();
  t = await startTestStack({
    pick: ({ turn, input }) => {
      // The second job: a command exiting 3 (approved), then one left waiting until the job is cancelled.
      if (input.includes(FAILING_TASK))
        return { toolCalls: [{ name: "run_command", input: { command: turn === 0 ? "exit 3" : "echo never" } }] };
      return turn === 0
        ? { toolCalls: [{ name: "run_command", input: { command: `echo ${MARKER}` } }] }
        : { text: `done: ${MARKER}` };
    },
  });
  const repo = await makePluginRepo({
    agents: {
      careful: fakeAgentYaml({
        name: "careful",
        description: "asks before running commands",
        limits: { maxSteps: 5 },
        tools: ["run_command"],
        requiresApproval: ["run_command"],
        extra: `hooks:
  - name: commands-need-a-person
    match: fake.run_command
    decision: ask
    reason: a person checks every command
`,
      }),
    },
  });
  const installed = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
  receiver?.stop();
});

void test("a job with an approved tool call and model calls through the proxy is one trace across every service", async () => {
  const stack = t!;
  const started = await stack.cli(["run", "careful", `task ${MARKER}`, "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const approval = await eventually(async () => {
    const list = await stack.cli(["approvals", "list", "--job", jobId, "--json"]);
    const line = list.stdout.split("\n").find((l) => l.trim());
    return line ? (JSON.parse(line) as { callId: string }) : undefined;
  });
  const approved = await stack.cli(["approve", jobId, approval.callId]);
  assert.equal(approved.code, 0, approved.stderr);
  await stack.cli(["jobs", "watch", jobId]);
  const shown = JSON.parse((await stack.cli(["jobs", "show", jobId, "--json"])).stdout) as {
    state: string;
    resultText: string;
    error: string;
    traceId: string;
  };
  assert.equal(shown.state, "JOB_STATE_SUCCEEDED", shown.error);
  assert.equal(shown.resultText, `done: ${MARKER}`, "the marker did reach the model and back");

  // A second job: its command exits 3 (an error, approved), its next waits until the job is cancelled.
  const second = (await stack.cli(["run", "careful", FAILING_TASK, "--detach"])).stdout.trim();
  const pendingCall = async (seen: string[]): Promise<string> =>
    eventually(async () => {
      const list = await stack.cli(["approvals", "list", "--job", second, "--json"]);
      const calls = list.stdout
        .split("\n")
        .filter((l) => l.trim())
        .map((l) => (JSON.parse(l) as { callId: string }).callId);
      return calls.find((c) => !seen.includes(c));
    });
  const failingCall = await pendingCall([]);
  assert.equal((await stack.cli(["approve", second, failingCall])).code, 0);
  await pendingCall([failingCall]);
  const cancelled = await stack.cli(["jobs", "cancel", second]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  await stack.cli(["jobs", "watch", second]);

  // SIGTERM: every service flushes its spans and metrics before it exits.
  await stack.close();
  t = undefined;
  const { spans, metrics } = await eventually(async () => {
    const all = await receiver.received();
    return all.spans.filter((s) => s.name === "invoke_agent careful").length === 2 &&
      all.spans.some((s) => s.name.startsWith("chat ") && s.service === "oz0-llm-proxy")
      ? all
      : undefined;
  });

  // One root for the job, and every span of the job in its trace.
  const root = spans.find((s) => s.name === "invoke_agent careful" && s.attributes["oz0.job.id"] === jobId);
  assert.ok(root, `spans: ${spans.map((s) => `${s.service}:${s.name}`).join(", ")}`);
  assert.equal(root.service, "oz0-orchestrator");
  assert.equal(root.parentSpanId, "", "the job is the root of its trace");
  assert.equal(root.attributes["gen_ai.operation.name"], "invoke_agent");
  assert.equal(root.attributes["gen_ai.agent.name"], "careful");
  assert.equal(shown.traceId, root.traceId, "oz0 jobs show names the job's trace");
  const inTrace = spans.filter((s) => s.traceId === root.traceId);
  const byId = new Map(inTrace.map((s) => [s.spanId, s]));
  const one = (description: string, match: (s: ReceivedSpan) => boolean): ReceivedSpan => {
    const found = inTrace.filter(match);
    assert.equal(
      found.length,
      1,
      `${description}: ${found.length} found among ${inTrace.map((s) => `${s.service}:${s.name}`).join(", ")}`,
    );
    return found[0]!;
  };
  const parentOf = (s: ReceivedSpan): ReceivedSpan | undefined => byId.get(s.parentSpanId);

  const session = one(
    "the orchestrator's session span",
    (s) => s.service === "oz0-orchestrator" && s.name === "session careful",
  );
  assert.equal(session.parentSpanId, root.spanId);
  const sessionId = session.attributes["gen_ai.conversation.id"];
  assert.match(String(sessionId), /^ses_/);

  // orchestrator → sandbox: the RPC and the sandbox's session span continue the orchestrator's session span.
  const rpc = one(
    "the sandbox's RunSession span",
    (s) => s.service === "oz0-sandbox" && s.name === "oz0.sandbox.v1.SandboxService/RunSession",
  );
  assert.equal(rpc.parentSpanId, session.spanId);
  const sandboxSession = one(
    "the sandbox's session span",
    (s) => s.service === "oz0-sandbox" && s.name === "sandbox session careful",
  );
  assert.equal(sandboxSession.parentSpanId, session.spanId);
  assert.equal(sandboxSession.attributes["gen_ai.conversation.id"], sessionId);

  // The tool call, its permission wait and the hook's decision.
  const tool = one("execute_tool", (s) => s.service === "oz0-orchestrator" && s.name === "execute_tool run_command");
  assert.equal(tool.parentSpanId, session.spanId);
  assert.equal(tool.attributes["gen_ai.operation.name"], "execute_tool");
  assert.equal(tool.attributes["gen_ai.tool.name"], "run_command");
  assert.match(String(tool.attributes["gen_ai.tool.call.id"]), /^toolu_/);
  const permission = one("the permission wait", (s) => s.name === "permission run_command");
  assert.equal(permission.parentSpanId, tool.spanId);
  assert.equal(permission.attributes["gen_ai.tool.call.id"], tool.attributes["gen_ai.tool.call.id"]);
  assert.equal(permission.attributes["oz0.permission.needs_person"], true);
  assert.equal(permission.attributes["oz0.permission.allowed"], true);
  const hook = one("the hook's decision", (s) => s.name === "hook commands-need-a-person");
  assert.equal(hook.parentSpanId, permission.spanId);
  assert.equal(hook.attributes["oz0.hook.decision"], "ask");

  // Into the harness: its own spans reach the job's trace through the sandbox's relay (the harness
  // never sees the collector), below the sandbox's session span: a chat span per model call and
  // an execute_tool span per tool it ran.
  const harnessChats = inTrace.filter((s) => s.service === "oz0-fake-harness" && s.name === "chat claude-sonnet-5-5");
  assert.equal(
    harnessChats.length,
    2,
    `the harness's two model calls: ${inTrace.map((s) => `${s.service}:${s.name}`).join(", ")}`,
  );
  for (const chat of harnessChats) {
    assert.equal(chat.parentSpanId, sandboxSession.spanId);
    assert.equal(chat.attributes["gen_ai.operation.name"], "chat");
    assert.equal(chat.attributes["gen_ai.conversation.id"], sessionId);
    assert.ok(Number(chat.attributes["gen_ai.usage.output_tokens"]) > 0, JSON.stringify(chat.attributes));
  }
  const harnessTool = one(
    "the harness's tool span",
    (s) => s.service === "oz0-fake-harness" && s.name === "execute_tool run_command",
  );
  assert.equal(harnessTool.parentSpanId, sandboxSession.spanId);
  assert.equal(harnessTool.attributes["gen_ai.tool.call.id"], tool.attributes["gen_ai.tool.call.id"]);

  // Out to the proxy: each model call carries the harness's chat span as its traceparent, and the proxy's chat span continues it.
  const chats = inTrace.filter((s) => s.service === "oz0-llm-proxy" && s.name === "chat claude-sonnet-5-5");
  assert.equal(chats.length, 2, "two model turns");
  assert.deepEqual(new Set(chats.map((chat) => chat.parentSpanId)), new Set(harnessChats.map((chat) => chat.spanId)));
  for (const chat of chats) {
    assert.equal(chat.attributes["gen_ai.operation.name"], "chat");
    assert.equal(chat.attributes["gen_ai.provider.name"], "anthropic");
    assert.equal(chat.attributes["gen_ai.request.model"], "claude-sonnet-5-5");
    assert.equal(chat.attributes["gen_ai.conversation.id"], sessionId);
    assert.ok(Number(chat.attributes["gen_ai.usage.input_tokens"]) > 0, JSON.stringify(chat.attributes));
    assert.ok(Number(chat.attributes["gen_ai.usage.output_tokens"]) > 0);
    assert.equal(typeof chat.attributes["gen_ai.usage.cache_read.input_tokens"], "number");
    assert.equal(typeof chat.attributes["gen_ai.usage.cache_creation.input_tokens"], "number");
    // What the provider said of its answer, and where the provider is.
    assert.equal(chat.attributes["gen_ai.response.model"], "claude-sonnet-5-5", JSON.stringify(chat.attributes));
    assert.match(String(chat.attributes["gen_ai.response.id"]), /^msg_/);
    assert.ok(Array.isArray(chat.attributes["gen_ai.response.finish_reasons"]));
    assert.equal(chat.attributes["server.address"], "127.0.0.1");
    assert.equal(chat.attributes["server.port"], Number(new URL(stack.model.url).port));
    assert.ok(
      inTrace.some((s) => s.parentSpanId === chat.spanId && s.name === "attempt 1"),
      "one span per attempt upstream",
    );
  }

  // The events service: the job's lifecycle events carry their span's traceparent, and it continues it.
  const published = inTrace.filter((s) => s.service === "oz0-events");
  assert.ok(
    published.some((s) => s.name === "publish job.created" && s.parentSpanId === root.spanId),
    published.map((s) => s.name).join(", "),
  );
  assert.ok(published.some((s) => s.name === "publish tool.called" && s.parentSpanId === tool.spanId));
  // The proxy's usage event of each model call continues that call's chat span.
  const callEvents = published.filter((s) => s.name === "publish llm.call_completed");
  assert.equal(callEvents.length, 2, published.map((s) => s.name).join(", "));
  for (const event of callEvents)
    assert.ok(
      chats.some((chat) => chat.spanId === event.parentSpanId),
      "below its call's chat span",
    );
  // The job's last event too (it ends the job's span, and used to leave without its trace).
  assert.ok(
    published.some((s) => s.name === "publish job.completed" && s.parentSpanId === root.spanId),
    published.map((s) => s.name).join(", "),
  );

  // The producers publish over streams they keep open (PublishStream), which make no span: a
  // stream outlives every job it carries. Their events joined the job's trace above, by their
  // PRODUCER spans; a Publish call (a producer without streams) is never a lone trace of its own.
  assert.deepEqual(
    spans.filter((s) => s.name === "oz0.events.v1.EventsService/PublishStream"),
    [],
    "no span for a publish stream",
  );
  const publishCalls = spans.filter(
    (s) => s.service === "oz0-events" && s.name === "oz0.events.v1.EventsService/Publish",
  );
  for (const call of publishCalls) assert.notEqual(call.parentSpanId, "", "a Publish call is not a trace of its own");

  // The session token is minted and revoked in the job's trace, not in the RunAgent call's,
  // which started the job and is over in milliseconds: that trace holds its own span only.
  const mint = one("the token's mint", (s) => s.name === "oz0.llmproxy.v1.LlmProxyService/MintSessionToken");
  assert.equal(mint.parentSpanId, root.spanId);
  const revoke = one("the token's revoke", (s) => s.name === "oz0.llmproxy.v1.LlmProxyService/RevokeSessionToken");
  assert.equal(revoke.parentSpanId, root.spanId);
  const runAgent = spans.find(
    (s) => s.name === "oz0.orchestrator.v1.JobService/RunAgent" && s.spanId === root.links[0]?.spanId,
  );
  assert.ok(runAgent, "the job links the RunAgent call that created it");
  assert.deepEqual(
    spans.filter((s) => s.traceId === runAgent.traceId).map((s) => s.name),
    ["oz0.orchestrator.v1.JobService/RunAgent"],
  );

  // Calls that approve, watch or cancel a job keep traces of their own, linked to the job's span.
  const linksTo = (job: ReceivedSpan, name: string): void => {
    const calls = spans.filter(
      (s) =>
        s.name === `oz0.orchestrator.v1.JobService/${name}` &&
        s.attributes["oz0.job.id"] === job.attributes["oz0.job.id"],
    );
    assert.ok(calls.length > 0, `no ${name} call about ${String(job.attributes["oz0.job.id"])}`);
    for (const call of calls) {
      assert.equal(call.parentSpanId, "", `${name} is not a child of the job`);
      assert.notEqual(call.traceId, job.traceId);
      assert.deepEqual(
        call.links,
        [{ traceId: job.traceId, spanId: job.spanId, attributes: { "oz0.job.id": job.attributes["oz0.job.id"] } }],
        `${name} links the job`,
      );
    }
  };
  linksTo(root, "AnswerPermission");
  linksTo(root, "WatchJob");
  const secondRoot = spans.find((s) => s.name === "invoke_agent careful" && s.attributes["oz0.job.id"] === second);
  assert.ok(secondRoot);
  linksTo(secondRoot, "CancelJob");
  assert.equal(secondRoot.attributes["oz0.job.state"], "cancelled");
  assert.equal(secondRoot.statusMessage, "job_cancelled", "an error span says why");
  const secondTrace = spans.filter((s) => s.traceId === secondRoot.traceId);
  const secondRevoke = secondTrace.find((s) => s.name === "oz0.llmproxy.v1.LlmProxyService/RevokeSessionToken");
  assert.equal(secondRevoke?.parentSpanId, secondRoot.spanId, "a cancelled job's token is revoked in its own trace");

  // A command that exited non-zero is an error, in the harness's span and the orchestrator's, with a message (never its output).
  for (const service of ["oz0-fake-harness", "oz0-orchestrator"]) {
    const failed = secondTrace.filter((s) => s.service === service && s.name === "execute_tool run_command");
    assert.ok(failed.length >= 1, `${service}: ${secondTrace.map((s) => `${s.service}:${s.name}`).join(", ")}`);
    const [first] = failed.sort((a, b) => Number(BigInt(a.startTimeUnixNano) - BigInt(b.startTimeUnixNano)));
    assert.equal(first!.statusCode, 2, `${service}: the failed command is an error span`);
    assert.ok(first!.statusMessage, `${service}: the error span says why`);
  }
  // Stop reasons and outcomes by name, never a proto enum's number.
  assert.equal(session.attributes["oz0.session.stop_reason"], "completed");
  assert.equal(permission.attributes["oz0.permission.outcome"], "answered");

  // Every span of the trace hangs off the root.
  for (const s of inTrace) {
    let cursor: ReceivedSpan | undefined = s;
    for (let hops = 0; cursor && cursor !== root && hops < 20; hops++) cursor = parentOf(cursor);
    assert.equal(cursor, root, `${s.service}:${s.name} is not below the job's root`);
  }

  // No content on any span of any service.
  for (const s of spans) {
    for (const key of CONTENT_ATTRIBUTES)
      assert.equal(s.attributes[key], undefined, `${s.service}:${s.name} has ${key}`);
    assert.ok(
      !JSON.stringify(s.attributes).includes(MARKER),
      `${s.service}:${s.name} carries content: ${JSON.stringify(s.attributes)}`,
    );
  }

  // Metrics, exported the same way.
  const metric = (service: string, name: string) => metrics.filter((m) => m.service === service && m.name === name);
  const tokens = metric("oz0-llm-proxy", "gen_ai.client.token.usage");
  assert.ok(
    tokens.some((m) => m.attributes["gen_ai.token.type"] === "input" && m.value > 0),
    JSON.stringify(tokens),
  );
  assert.ok(tokens.some((m) => m.attributes["gen_ai.token.type"] === "output" && m.value > 0));
  assert.ok(metric("oz0-llm-proxy", "gen_ai.client.operation.duration").some((m) => m.count === 2));
  assert.ok(
    metric("oz0-orchestrator", "oz0.job.count").some(
      (m) => m.attributes["oz0.job.state"] === "succeeded" && m.value === 1,
    ),
  );
  assert.ok(metric("oz0-orchestrator", "oz0.session.duration").some((m) => m.count === 1));
  assert.ok(
    metric("oz0-orchestrator", "oz0.approval.count").some(
      (m) => m.attributes["oz0.approval.allowed"] === true && m.value === 1,
    ),
  );
  assert.ok(metric("oz0-orchestrator", "oz0.approval.duration").some((m) => m.count === 1));
});
