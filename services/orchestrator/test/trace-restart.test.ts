// A job's trace survives its orchestrator: the process is killed (SIGKILL)
// while a tool call waits for a person, a new one starts on the same data,
// resumes the job and is asked to approve. The job's root span lived in the
// dead process (never exported), but the store kept its traceparent: the
// approve call links it, and what happens after the restart (the re-attached
// session, the token's revoke, job.completed) is in the job's trace, below
// the root as a remote parent. Health checks without a caller's trace leave
// no span. Real services as processes, one OTLP receiver process.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "@oz0/proto/grpc/health/v1/health_pb";
import {
  startOtlpReceiverProcess,
  type OtlpReceiverProcess,
  type ReceivedSpan,
} from "./support/otlp-receiver-process.js";
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let receiver: OtlpReceiverProcess;
let t: TestStack | undefined;

before(async () => {
  receiver = await startOtlpReceiverProcess();
  t = await startTestStack({
    pick: ({ turn }) =>
      turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo resumed" } }] } : { text: "done" },
  });
  const repo = await makePluginRepo({
    agents: {
      careful: fakeAgentYaml({
        name: "careful",
        description: "asks before running commands",
        limits: { maxSteps: 5 },
        tools: ["run_command"],
        requiresApproval: ["run_command"],
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

void test("a job approved after its orchestrator was killed and started again stays one trace", async () => {
  const stack = t!;
  const started = await stack.cli(["run", "careful", "a command a person approves", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const pendingCall = async (): Promise<string> =>
    eventually(async () => {
      const list = await stack.cli(["approvals", "list", "--job", jobId, "--json"]);
      const line = list.stdout.split("\n").find((l) => l.trim());
      return line ? (JSON.parse(line) as { callId: string }).callId : undefined;
    });
  const callId = await pendingCall();

  await stack.restartOrchestrator();
  // A health check with no trace of its caller (as a probe sends it) leaves no span.
  const health = createClient(Health, createGrpcTransport({ baseUrl: stack.url }));
  assert.equal((await health.check({ service: "liveness" })).status, 1);
  const approved = await stack.cli(["approve", jobId, callId]);
  assert.equal(approved.code, 0, approved.stderr);
  await stack.cli(["jobs", "watch", jobId]);
  const shown = JSON.parse((await stack.cli(["jobs", "show", jobId, "--json"])).stdout) as {
    state: string;
    error: string;
    traceId: string;
  };
  assert.equal(shown.state, "JOB_STATE_SUCCEEDED", shown.error);
  assert.match(shown.traceId, /^[0-9a-f]{32}$/);

  // SIGTERM: every service flushes its spans before it exits.
  await stack.close();
  t = undefined;
  const revokeName = "oz0.llmproxy.v1.LlmProxyService/RevokeSessionToken";
  const spans = await eventually(async () => {
    const all = (await receiver.received()).spans;
    // Waits for the spans, not for where they are: a revoke outside the job's trace fails below instead of hanging here.
    return all.some((s) => s.name === revokeName) ? all : undefined;
  });
  const names = (list: ReceivedSpan[]): string => list.map((s) => `${s.service}:${s.name}`).join(", ");
  const inTrace = spans.filter((s) => s.traceId === shown.traceId);
  const one = (description: string, match: (s: ReceivedSpan) => boolean): ReceivedSpan => {
    const found = inTrace.filter(match);
    assert.equal(found.length, 1, `${description}: ${found.length} found among ${names(inTrace)}`);
    return found[0]!;
  };

  // The root span ended with the killed process, unexported; its children name it: the token's mint, before the restart.
  assert.equal(
    spans.filter((s) => s.name === "invoke_agent careful").length,
    0,
    "the root was never exported, and no second root was made",
  );
  const mint = one("the token's mint", (s) => s.name === "oz0.llmproxy.v1.LlmProxyService/MintSessionToken");
  const rootSpanId = mint.parentSpanId;
  assert.notEqual(rootSpanId, "");

  // After the restart: the approve call, in a trace of its own, links the job's root from the store.
  const approve = spans.filter(
    (s) => s.name === "oz0.orchestrator.v1.JobService/AnswerPermission" && s.attributes["oz0.job.id"] === jobId,
  );
  assert.equal(approve.length, 1, names(spans));
  assert.notEqual(approve[0]!.traceId, shown.traceId);
  assert.deepEqual(approve[0]!.links, [
    { traceId: shown.traceId, spanId: rootSpanId, attributes: { "oz0.job.id": jobId } },
  ]);
  // The re-attached session, the token's revoke and the job's last event are in the job's trace, below its root.
  const session = one(
    "the re-attached session",
    (s) =>
      s.service === "oz0-orchestrator" &&
      s.name === "session careful" &&
      s.attributes["oz0.session.reattached"] === true,
  );
  assert.equal(session.parentSpanId, rootSpanId);
  const revoke = one("the token's revoke", (s) => s.name === revokeName);
  assert.equal(revoke.parentSpanId, rootSpanId);
  const completed = one("job.completed", (s) => s.service === "oz0-events" && s.name === "publish job.completed");
  assert.ok(
    [rootSpanId, session.spanId].includes(completed.parentSpanId),
    `job.completed continues the job's root or its session: ${completed.parentSpanId}`,
  );
  // Health checks with no caller's trace: none, from either orchestrator process.
  assert.deepEqual(
    spans.filter((s) => s.name === "grpc.health.v1.Health/Check").map((s) => s.service),
    [],
  );
});
