// A job's lifecycle events survive the death of the orchestrator that ran it.
// They are stored in the transaction of the job change they report and
// shipped from there; before, they waited in the process's memory for the
// events service, and a SIGKILL lost them. Here the events service is out of
// reach (a cut TCP relay) while a job runs to its end, the orchestrator is
// SIGKILLed, the relay comes back, and a new orchestrator on the same data
// directory ships the job's events: each once on the events service's log.
import { bearerInterceptor } from "@oz0/serving";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventsService, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobService, JobState, PluginService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { startServiceProcess, type StackProcess } from "../src/dev/embedded-stack.js";
import { eventually } from "./postgres-test-support.js";
import { TcpRelay } from "./support/tcp-relay.js";
import { fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let relay: TcpRelay;
let relayUrl: string;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-lifecycle-outbox-"));
let orchestrator: StackProcess | undefined;

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "done" }) });
  const events = new URL(t.stack.urls.events);
  relay = new TcpRelay({ host: events.hostname, port: Number(events.port) });
  relayUrl = `http://127.0.0.1:${await relay.listen()}`;
});

after(async () => {
  await orchestrator?.stop();
  await relay?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

const startOrchestrator = (): Promise<StackProcess> =>
  startServiceProcess({
    name: "orchestrator",
    env: {
      ...t.stack.identityEnv("orchestrator"),
      OZ0_HOME: home,
      OZ0_SANDBOX_URLS: t.stack.urls.sandbox,
      OZ0_LLM_PROXY_URL: t.stack.urls["llm-proxy"],
      OZ0_EVENTS_URL: relayUrl,
    },
    logFile: path.join(home, "logs", "orchestrator.log"),
  });

/** What the orchestrator published about the job (the sandbox and the proxy publish their own). */
async function eventsOf(jobId: string): Promise<PublicEvent[]> {
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  const log: PublicEvent[] = [];
  for await (const r of events.watch({ fromPosition: 0n, untilCaughtUp: true }))
    if (r.event?.jobId === jobId && r.event.source === "orchestrator") log.push(r.event);
  return log;
}

void test("a job's lifecycle events reach the events service once after its orchestrator was SIGKILLed before shipping them", async () => {
  relay.cut();
  orchestrator = await startOrchestrator();
  const transport = createGrpcTransport({
    baseUrl: orchestrator.url,
    interceptors: [bearerInterceptor(t.stack.ownerToken)],
  });
  const repo = await makePluginRepo({
    agents: {
      plain: fakeAgentYaml({ name: "plain", tools: "harness-defaults" }),
    },
  });
  await createClient(PluginService, transport).installPlugin({ source: repo });
  const jobs = createClient(JobService, transport);
  const { job } = await jobs.runAgent({ agent: "plain", input: "ship it later" });
  const done = await eventually(async () => {
    const current = (await jobs.getJob({ jobId: job!.id })).job!;
    return current.state === JobState.SUCCEEDED || current.state === JobState.FAILED ? current : undefined;
  }, "the job ending");
  assert.equal(done.state, JobState.SUCCEEDED, done.error);
  assert.deepEqual(await eventsOf(job!.id), [], "nothing reached the events service while it was out of reach");

  await orchestrator.stop({ signal: "SIGKILL" });
  relay.resume();
  orchestrator = await startOrchestrator();

  const shipped = await eventually(
    async () => {
      const log = await eventsOf(job!.id);
      return ["job.created", "job.completed"].every((type) => log.some((e) => e.type === type)) ? log : undefined;
    },
    "the job's events on the events service",
    60_000,
  );
  const types = shipped.map((e) => e.type);
  for (const type of ["job.created", "job.completed"])
    assert.equal(types.filter((x) => x === type).length, 1, `${type} once: ${types.join(", ")}`);
  assert.equal(new Set(shipped.map((e) => e.id)).size, shipped.length, "no event twice");
});
