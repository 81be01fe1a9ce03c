// A job's session.started and session.ended come from the orchestrator, from
// what the job's node reported on its stream (how it isolates the session, how
// it ended), and from nobody else: the sandbox publishes nothing, and the
// events service refuses its credential, which every node holds beside agent
// code and with which a node could once say, of any job, that its session
// started or ended. Real services on loopback, the fake harness, the scripted
// model.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { rawEvent } from "@oz0/events-client";
import { EventsService, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobService, JobState, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { bearerInterceptor } from "@oz0/serving";
import { eventually } from "./support/eventually.js";
import { fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "done" }) });
});

after(async () => {
  await t?.close();
});

function eventsAs(token: string) {
  return createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(token)] }),
  );
}

async function eventsOf(jobId: string): Promise<PublicEvent[]> {
  const log: PublicEvent[] = [];
  for await (const r of eventsAs(t.stack.ownerToken).watch({ jobId, fromPosition: 0n, untilCaughtUp: true }))
    if (r.event) log.push(r.event);
  return log;
}

void test("the orchestrator publishes a job's session.started and session.ended, as its node reported them", async () => {
  const transport = createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(t.stack.ownerToken)] });
  const repo = await makePluginRepo({ agents: { plain: fakeAgentYaml({ name: "plain", tools: "harness-defaults" }) } });
  await createClient(PluginService, transport).installPlugin({ source: repo });
  const jobs = createClient(JobService, transport);
  const { job } = await jobs.runAgent({ agent: "plain", input: "say done" });
  const done = await eventually(async () => {
    const current = (await jobs.getJob({ jobId: job!.id })).job!;
    return current.state === JobState.SUCCEEDED || current.state === JobState.FAILED ? current : undefined;
  }, "the job ending");
  assert.equal(done.state, JobState.SUCCEEDED, done.error);

  const log = await eventually(async () => {
    const events = await eventsOf(job!.id);
    return events.some((e) => e.type === "job.completed") ? events : undefined;
  }, "the job's events on the events service");
  // The LLM proxy's llm.call_completed lands wherever its model call ended; nothing is the sandbox's.
  assert.deepEqual(
    log.filter((e) => e.source !== "llm-proxy").map((e) => [e.type, e.source]),
    [
      ["job.created", "orchestrator"],
      ["session.started", "orchestrator"],
      ["session.ended", "orchestrator"],
      ["job.completed", "orchestrator"],
    ],
  );
  const [started, ended] = log.filter((e) => e.type.startsWith("session."));
  assert.equal(started!.sessionId, ended!.sessionId);
  assert.equal(started!.attributes?.harness, "oz0-fake-harness");
  // The stack's sandbox picks its isolation (bwrap where it works here, else user or none): the node's word.
  assert.match(String(started!.attributes?.isolation), /^(bwrap|user|none)$/);
  assert.equal(ended!.status, "completed");
  assert.equal(ended!.attributes?.exit_code, 0);
  assert.equal(ended!.attributes?.stop_reason, "completed");
  assert.equal(ended!.attributes?.turns, 1);
  assert.equal(typeof ended!.attributes?.duration_ms, "number");
});

void test("the events service takes nothing from the sandbox's credential", async () => {
  const asSandbox = eventsAs(t.stack.identityEnv("sandbox").OZ0_SERVICE_TOKEN!);
  await assert.rejects(
    asSandbox.publish({ events: [rawEvent("session.ended", { jobId: "job-victim", status: "completed" })] }),
    (error: unknown) => {
      // Not even known as a caller: the events service holds no digest of it.
      assert.equal(ConnectError.from(error).code, Code.Unauthenticated);
      return true;
    },
  );
  assert.deepEqual(await eventsOf("job-victim"), []);
});
