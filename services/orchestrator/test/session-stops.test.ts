// A sandbox node is trusted to run a session, not to end it
// (src/jobs/session-stops.ts). Behind a node that is the attacker's
// (support/hostile-sandbox.ts), which ignores the session's deadline and
// every request to stop it, a job must still end: past its deadline, after a
// cancel, and after an orchestrator restart. Once it ended, the session's
// token reaches no model, though its harness still runs on that node. A graph
// run's custom step on such a node holds no cancel of the run either
// (harness-operations-runner.test.ts has the scratch sessions').
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createLogger, stackTokenFor } from "@oz0/serving";
import { GraphJobs } from "../src/graphs/graph-jobs.js";
import { GraphRegistry } from "../src/graphs/graph-registry.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import { openGraphStore } from "../src/store/graph-store.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import type { JobRecord } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { HostileSandbox } from "./support/hostile-sandbox.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { commitAll, eventually, startTestStack, type TestStack } from "./support/test-stack.js";

const hookFixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks");
const rogueHarness = path.join(hookFixtures, "rogue-harness.mjs");

const home = mkdtempSync(path.join(os.tmpdir(), "oz0-session-stops-"));
const repo = mkdtempSync(path.join(os.tmpdir(), "oz0-endless-repo-"));
const graphRepo = mkdtempSync(path.join(os.tmpdir(), "oz0-endless-graph-repo-"));

let t: TestStack;
let stubborn: HostileSandbox;
let stubbornUrl: string;
let silent: HostileSandbox;
let silentUrl: string;
let store: SqliteJobStore;
const runners = new Set<JobRunner>();

/** The orchestrator's clocks, short: a minute past the deadline and 30 s after asking would make a slow test. */
function jobRunner(sandboxUrl = stubbornUrl): JobRunner {
  const runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    name: "orchestrator-session-stops",
    sandboxUrl,
    overdueAfterMs: 300,
    stopWaitMs: 700,
  });
  runners.add(runner);
  return runner;
}

async function closeRunner(runner: JobRunner): Promise<void> {
  runners.delete(runner);
  await runner.close();
}

function ended(jobId: string): Promise<JobRecord> {
  return endedJob(store, jobId);
}

/** A model call with the session's own token and headers, as its harness would make one. */
async function modelCall(sessionId: string): Promise<number> {
  const llm = stubborn.sessionRequest(sessionId)?.llm;
  assert.ok(llm?.token, "the node was given the session's token");
  const response = await fetch(`${llm.anthropicBaseUrl}/v1/messages`, {
    method: "POST",
    headers: { ...llm.headers, "x-api-key": llm.token, "content-type": "application/json" },
    body: JSON.stringify({ model: "claude-sonnet-5-5", max_tokens: 10, messages: [{ role: "user", content: "hi" }] }),
  });
  await response.arrayBuffer();
  return response.status;
}

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "still here" }) });
  stubborn = new HostileSandbox({ ignoreCancel: true });
  stubbornUrl = await stubborn.listen();
  silent = new HostileSandbox({ ignoreCancel: "unanswered" });
  silentUrl = await silent.listen();
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  mkdirSync(path.join(repo, "agents"));
  mkdirSync(path.join(repo, "prompts"));
  mkdirSync(path.join(repo, "hooks"));
  copyFileSync(path.join(hookFixtures, "hold.mjs"), path.join(repo, "hooks", "hold.mjs"));
  writeFileSync(path.join(repo, "prompts", "p.md"), "Work.\n");
  // A harness that starts and never ends by itself: only its node could stop it, and this node does not.
  const endless = `console.log(JSON.stringify({ started: { harnessName: "endless" } })); setInterval(() => {}, 1000)`;
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    `name: endless\nversion: 0.1.0\nharnesses:\n  - name: endless\n    command: ["node", "-e", '${endless}']\n  - name: rogue\n    command: ["node", "${rogueHarness}"]\n    permissions: true\n    tools: [run_command]\n  - name: asking\n    command: ["node", "${path.join(hookFixtures, "parallel-harness.mjs")}"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/timed.yaml\n  - agents/untimed.yaml\n  - agents/rogue.yaml\n  - agents/held.yaml\n`,
  );
  const agent = (name: string, limits: string): string =>
    `name: ${name}\nruntime: harness:endless\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/p.md\n${limits}`;
  writeFileSync(path.join(repo, "agents", "timed.yaml"), agent("timed", "limits:\n  timeout: 1s\n"));
  writeFileSync(path.join(repo, "agents", "untimed.yaml"), agent("untimed", ""));
  writeFileSync(
    path.join(repo, "agents", "rogue.yaml"),
    agent("rogue", "harness:\n  tools: [run_command]\n").replace("harness:endless", "harness:rogue"),
  );
  // Its two calls (test/fixtures/hooks/parallel-harness.mjs) are held by a hook until it is killed, at 5 minutes.
  writeFileSync(
    path.join(repo, "agents", "held.yaml"),
    agent(
      "held",
      'limits:\n  timeout: 1s\nharness:\n  tools: [run_command]\nhooks:\n  - name: holding-guard\n    command: ["node", "hooks/hold.mjs"]\n    timeout: 5m\n',
    ).replace("harness:endless", "harness:asking"),
  );
  await commitAll(repo, "plugin");
  // Its command hook is the test's own.
  await new PluginRegistry({ store, home }).install({ source: repo, allowHostHooks: true });
});

after(async () => {
  for (const runner of runners) await runner.close();
  await stubborn?.close();
  await silent?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
  rmSync(repo, { recursive: true, force: true });
  rmSync(graphRepo, { recursive: true, force: true });
});

const overdue =
  /^the session ran past its deadline \(limits\.timeout 1s\) and its sandbox node had not ended it 0s later; the orchestrator stopped it; its sandbox node did not end the session within 1s of being asked to, so the job was ended without it$/;

void test("a session its node lets run past the deadline: the orchestrator asks it to stop, then ends the job without it", async () => {
  const runner = jobRunner();
  const job = await runner.runAgent({ agent: "timed", input: "run on" });
  await eventually(async () => stubborn.sessionRequest(job.sessionId), "the session started on the node");
  assert.equal(await modelCall(job.sessionId), 200, "the control: while its job runs, the session reaches the model");
  const done = await ended(job.id);
  assert.equal(done.state, "failed");
  assert.match(done.error ?? "", overdue);
  assert.match(stubborn.cancelRequested(job.sessionId) ?? "", /^the session ran past its deadline/);
  assert.ok(stubborn.running(job.sessionId), "the node let the harness run on");
  assert.equal(await modelCall(job.sessionId), 401, "the ended job's token reaches no model");
  await closeRunner(runner);
});

// A call waiting for its hook holds the job's lock, which the orchestrator's stop of the overdue session waits for:
// the job ran on until the hook's timeout (5 minutes here), and the call was recorded as the hook's denial.
void test("a session its node lets run past the deadline while a hook decides its calls: the stop ends the hook too", async () => {
  const hooks: net.Socket[] = [];
  const hookRuns = Promise.withResolvers<void>();
  const server = net.createServer((socket) => {
    hooks.push(socket.on("error", () => undefined));
    hookRuns.resolve();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const runner = jobRunner();
  try {
    const job = await runner.runAgent({ agent: "held", input: `hold ${(server.address() as net.AddressInfo).port}` });
    await hookRuns.promise;
    const hookEnded = new Promise((resolve) => hooks[0]!.once("close", resolve));
    const done = await ended(job.id);
    await hookEnded;
    assert.equal(done.state, "failed");
    // Its harness ends once its calls are answered cancelled, so the node's end may come before the stop's wait is over.
    assert.match(
      done.error ?? "",
      /^the session ran past its deadline \(limits\.timeout 1s\) .*; the orchestrator stopped it/,
    );
    const calls = await store.listPermissions({ jobId: job.id });
    assert.deepEqual(
      calls.map((c) => [c.callId, c.status, c.reason]).sort(),
      ["call_first", "call_second"].map((callId) => [callId, "cancelled", "the job's session ran past its deadline"]),
    );
    assert.equal(hooks.length, 1, "the other call's hook never ran");
  } finally {
    server.close();
    await closeRunner(runner);
  }
});
void test("a cancel its node ignores: the job ends cancelled, and its token reaches no model", async () => {
  const runner = jobRunner();
  const job = await runner.runAgent({ agent: "untimed", input: "run on" });
  await eventually(async () => (await store.getJob(job.id))?.state === "running" || undefined, "the job runs");
  await runner.cancel({ jobId: job.id, reason: "not needed any more" });
  assert.equal(stubborn.cancelRequested(job.sessionId), "not needed any more");
  const done = await ended(job.id);
  assert.equal(done.state, "cancelled");
  assert.equal(done.error, "not needed any more");
  assert.ok(stubborn.running(job.sessionId), "the node let the harness run on");
  assert.equal(await modelCall(job.sessionId), 401);
  await closeRunner(runner);
});

void test("after an orchestrator restart, the deadline is watched again from the session's start", async () => {
  const first = jobRunner();
  const job = await first.runAgent({ agent: "timed", input: "run on" });
  await eventually(async () => (await store.getJob(job.id))?.startedAt, "the session started");
  // Gone before its clocks run out: only the next orchestrator can end the job.
  await closeRunner(first);
  assert.equal(stubborn.cancelRequested(job.sessionId), undefined, "the first orchestrator asked nothing of the node");
  assert.equal((await store.getJob(job.id))?.error, "", "nor stored a reason to stop");
  const second = jobRunner();
  assert.equal(await second.resumeAll(), 1);
  const done = await ended(job.id);
  assert.equal(done.state, "failed");
  assert.match(done.error ?? "", overdue);
  await closeRunner(second);
});

void test("a harness that ran a tool without asking, behind a node that lets it run on: the job fails with the rule it broke", async () => {
  const runner = jobRunner();
  const job = await runner.runAgent({ agent: "rogue", input: "unasked" });
  const done = await ended(job.id);
  assert.equal(done.state, "failed");
  assert.equal(
    done.error,
    "policy bypass: harness rogue ran tool call call_rogue without asking permission first (rule: every tool call asks first); the job was stopped; its sandbox node did not end the session within 1s of being asked to, so the job was ended without it",
  );
  assert.ok(stubborn.running(job.sessionId), "the node let the harness run on");
  assert.equal(await modelCall(job.sessionId), 401);
  await closeRunner(runner);
});

void test("a node that never answers the cancel holds neither the job, nor the cancel, nor the orchestrator's shutdown", async () => {
  const runner = jobRunner(silentUrl);
  const job = await runner.runAgent({ agent: "untimed", input: "run on" });
  await eventually(async () => (await store.getJob(job.id))?.state === "running" || undefined, "the job runs");
  const cancelling = runner.cancel({ jobId: job.id, reason: "not needed any more" }).then(
    () => "answered",
    (error: unknown) => String(error),
  );
  const done = await ended(job.id);
  assert.equal(done.state, "cancelled");
  assert.equal(done.error, "not needed any more");
  // The call to the node gives up on its own (the job ended long before).
  assert.match(await cancelling, /deadline_exceeded/);
  await closeRunner(runner);
});

void test("a cancel stored at another replica: the replica following the job asks its node, and ends the job without it", async () => {
  const runner = jobRunner();
  const job = await runner.runAgent({ agent: "untimed", input: "run on" });
  await eventually(async () => (await store.getJob(job.id))?.state === "running" || undefined, "the job runs");
  // What the replica a person asked writes (on PostgreSQL its notice then reaches this one: leases-cluster.test.ts).
  await store.append({
    jobId: job.id,
    events: [],
    job: { cancelRequestedAt: new Date(), error: "cancelled elsewhere" },
  });
  await runner.heedCancel(job.id);
  assert.equal(await eventually(async () => stubborn.cancelRequested(job.sessionId)), "cancelled elsewhere");
  const done = await ended(job.id);
  assert.equal(done.state, "cancelled");
  assert.equal(done.error, "cancelled elsewhere");
  await closeRunner(runner);
});

void test("a custom graph step its node lets run on: the run's cancel ends the graph job, and its stream is let go", async () => {
  // A step whose module never returns, in a graph of that one step.
  mkdirSync(path.join(graphRepo, "graphs"));
  mkdirSync(path.join(graphRepo, "steps"));
  writeFileSync(
    path.join(graphRepo, "steps", "endless.mjs"),
    "export default class Endless { run() { setInterval(() => {}, 1000); return new Promise(() => {}); } }\n",
  );
  writeFileSync(
    path.join(graphRepo, "graphs", "endless-step.yaml"),
    "format: oz0.graph/v1\nkind: harness\nname: endless-step\nid: harness:endless-step\nroot:\n  - kind: step\n    id: step:endless\n    step: endless\n    module: steps/endless.mjs\n",
  );
  writeFileSync(
    path.join(graphRepo, "oz0-plugin.yaml"),
    "name: endless-graph\nversion: 0.1.0\ngraphs:\n  - graphs/endless-step.yaml\n",
  );
  await commitAll(graphRepo, "graph");
  const feed = new JobFeed();
  const placement = new StaticPlacement({
    runners: [
      new SandboxClient({ url: stubbornUrl, token: stackTokenFor(t.stack.credentials, "orchestrator", "sandbox") }),
    ],
  });
  const runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    name: "orchestrator-session-stops-graph",
    sandboxUrl: stubbornUrl,
    stopWaitMs: 700,
    feed,
    placement,
  });
  runners.add(runner);
  const graphStore = await openGraphStore({ home });
  const registry = new GraphRegistry({ graphStore, store });
  await new PluginRegistry({ store, home, graphs: registry }).install({ source: graphRepo });
  const graphs = new GraphJobs({
    graphStore,
    store,
    feed,
    jobs: runner,
    registry,
    placement,
    logger: createLogger({ name: "orchestrator-session-stops-graph", level: "error" }),
  });
  try {
    const before = new Set(stubborn.sessionIds());
    const job = await graphs.run({ graph: "endless-step", input: "run on" });
    const step = await eventually(
      async () => stubborn.sessionIds().find((id) => !before.has(id) && id.startsWith("ses_step_")),
      "the custom step's session started on the node",
    );
    await graphs.cancel({ jobId: job.id, reason: "not needed any more" });
    const done = await ended(job.id);
    assert.equal(done.state, "cancelled", done.error);
    assert.equal(stubborn.cancelRequested(step), "the graph run stopped this step");
    assert.ok(stubborn.running(step), "the node let the step run on");
    // The run's cancel does not wait for its steps; once the run ended, the step's stream is let go (its halt).
    await eventually(async () => stubborn.followers(step) === 0 || undefined, "the step's stream let go");
  } finally {
    await graphs.close();
    await graphStore.close();
    await closeRunner(runner);
  }
});
