// Graph runs survive the orchestrator: it is SIGKILLed in the middle of an
// agent step, in a parallel branch, and while two approvals wait in parallel
// branches; a new orchestrator on the same data directory resumes every run
// by itself. Each run then finishes with every step recorded once, and no
// step's job started twice (the running ones are re-attached, not re-run).
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import Database from "better-sqlite3";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { agentOf } from "./support/graph-agents.js";
import { eventually, packageDir, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(packageDir, "test/fixtures/graphs/crash");

/** A step that the test cancels runs until it is cancelled (its prompt says so). */
const UNTIL_CANCELLED = "cancel-run";

function turn(agent: string, turnIndex: number, input: string): ScriptedTurn {
  switch (agent) {
    case "slow": {
      // Long enough that the kill lands while the command runs; the test waits for the step's job, not for time.
      // A step to be cancelled runs far longer: on a loaded machine a poll can miss a 4 s step's whole run
      // (a CI run once did, beside a 200-job test), and the test waited for a running step that had ended.
      const seconds = input.includes(UNTIL_CANCELLED) ? 600 : 4;
      return turnIndex === 0
        ? { toolCalls: [{ name: "run_command", input: { command: `sleep ${seconds} && echo slept` } }] }
        : { text: "slow done" };
    }
    case "careful-a":
    case "careful-b":
      return turnIndex === 0
        ? { toolCalls: [{ name: "run_command", input: { command: `echo ${agent}` } }] }
        : { text: `${agent} done` };
    default:
      return { text: `${agent} done` };
  }
}

interface JobJson {
  id: string;
  agent: { name: string; version?: number };
  input: string;
  state: string;
}

let t: TestStack;

async function jobs(): Promise<JobJson[]> {
  const listed = await t.cli(["jobs", "list", "--limit", "500", "--json"]);
  assert.equal(listed.code, 0, listed.stderr);
  return listed.stdout
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as JobJson);
}

/** The step jobs of one run (their input starts with the run's prompt), per agent. */
async function stepJobs(prompt: string): Promise<Record<string, JobJson[]>> {
  const out: Record<string, JobJson[]> = {};
  for (const j of await jobs())
    if (!j.id.startsWith("graph_") && j.input.startsWith(prompt)) (out[j.agent.name] ??= []).push(j);
  return out;
}

async function startGraph(graph: string, prompt: string): Promise<string> {
  const started = await t.cli(["run", graph, prompt, "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const id = /graph_\w+/.exec(started.stdout)?.[0];
  assert.ok(id, started.stdout);
  return id;
}

/** Steps recorded for a run: path → node id. Paths are unique by construction; the count is what matters. */
function recordedSteps(runId: string): { path: string; node_id: string }[] {
  const db = new Database(path.join(t.home, "graphs.db"), { readonly: true });
  try {
    return db
      .prepare(
        "SELECT s.path, s.node_id FROM graph_steps s JOIN graph_runs r ON s.run = r.id WHERE r.run_id = ? ORDER BY s.path",
      )
      .all(runId) as { path: string; node_id: string }[];
  } finally {
    db.close();
  }
}

async function waitToSucceed(graphJob: string): Promise<string> {
  const watched = await t.cli(["jobs", "watch", graphJob]);
  assert.equal(watched.code, 0, watched.stdout + watched.stderr);
  return watched.stdout;
}

before(async () => {
  t = await startTestStack({
    pick: ({ turn: n, request }) =>
      turn(agentOf(request), n, JSON.stringify((request.body?.messages as unknown[] | undefined)?.[0] ?? "")),
  });
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

void test("killed in the middle of an agent step: the step's job is re-attached, not run again", async () => {
  const prompt = "chain-run";
  const graphJob = await startGraph("chain", prompt);
  await eventually(async () =>
    (await stepJobs(prompt)).slow?.some((j) => j.state === "JOB_STATE_RUNNING") ? true : undefined,
  );
  await t.restartOrchestrator();
  const events = await waitToSucceed(graphJob);
  assert.match(events, /resumed after an orchestrator restart/);
  assert.match(events, /agent:slow \/0: re-attached to job/);
  const byAgent = await stepJobs(prompt);
  assert.equal(byAgent.slow?.length, 1);
  assert.equal(byAgent.finish?.length, 1);
  assert.deepEqual(
    recordedSteps(graphJob).map((s) => s.node_id),
    ["agent:slow", "agent:finish"],
  );
});

void test("killed while one parallel branch runs: the recorded branch is replayed, the other finishes", async () => {
  const prompt = "branches-run";
  const graphJob = await startGraph("branches", prompt);
  await eventually(async () => {
    const byAgent = await stepJobs(prompt);
    const quickDone = byAgent.quick?.some((j) => j.state === "JOB_STATE_SUCCEEDED");
    const slowRunning = byAgent.slow?.some((j) => j.state === "JOB_STATE_RUNNING");
    // The quick branch's step is recorded once its job succeeded and the engine checkpointed it.
    return quickDone && slowRunning && recordedSteps(graphJob).some((s) => s.node_id === "agent:quick")
      ? true
      : undefined;
  });
  await t.restartOrchestrator();
  const events = await waitToSucceed(graphJob);
  assert.match(events, /agent:quick \S+ already recorded, not run again/);
  const byAgent = await stepJobs(prompt);
  assert.equal(byAgent.slow?.length, 1);
  assert.equal(byAgent.quick?.length, 1);
  assert.equal(byAgent.finish?.length, 1);
  const steps = recordedSteps(graphJob)
    .map((s) => s.node_id)
    .sort();
  assert.deepEqual(steps, ["agent:finish", "agent:quick", "agent:slow"]);
});

void test("two approvals wait in parallel branches across a restart and are answered independently", async () => {
  const prompt = "approvals-run";
  const graphJob = await startGraph("approvals", prompt);
  const pending = async (): Promise<{ jobId: string; callId: string }[]> => {
    const listed = await t.cli(["approvals", "list", "--json"]);
    return listed.stdout
      .trim()
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { jobId: string; callId: string });
  };
  await eventually(async () => ((await pending()).length === 2 ? true : undefined));
  await t.restartOrchestrator();
  const byAgent = await stepJobs(prompt);
  const b = byAgent["careful-b"]![0]!;
  const a = byAgent["careful-a"]![0]!;
  const callOf = async (jobId: string): Promise<string> =>
    (await eventually(async () => (await pending()).find((p) => p.jobId === jobId))).callId;
  const approveB = await t.cli(["approve", b.id, await callOf(b.id)]);
  assert.equal(approveB.code, 0, approveB.stderr);
  await eventually(async () =>
    recordedSteps(graphJob).some((s) => s.node_id === "agent:careful-b") ? true : undefined,
  );
  // Answering b neither re-ran nor resumed a: its call still waits, and the run waits with it.
  assert.deepEqual(
    (await pending()).map((p) => p.jobId),
    [a.id],
  );
  // The graph job waits with it, and its events name the command that answers each call.
  const shown = await t.cli(["jobs", "show", graphJob, "--json"]);
  assert.match(shown.stdout, /JOB_STATE_WAITING/);
  const approveA = await t.cli(["approve", a.id, await callOf(a.id)]);
  assert.equal(approveA.code, 0, approveA.stderr);
  const events = await waitToSucceed(graphJob);
  assert.match(events, new RegExp(`agent:careful-a waits for approval: oz0 approve ${a.id} `));
  assert.match(events, new RegExp(`agent:careful-b waits for approval: oz0 approve ${b.id} `));
  const after = await stepJobs(prompt);
  assert.equal(after["careful-a"]?.length, 1);
  assert.equal(after["careful-b"]?.length, 1);
  assert.equal(after.finish?.length, 1);
  assert.deepEqual(
    recordedSteps(graphJob)
      .map((s) => s.node_id)
      .sort(),
    ["agent:careful-a", "agent:careful-b", "agent:finish"],
  );
});

void test("cancelling a graph job cancels the step that runs and ends the run cancelled", async () => {
  const prompt = UNTIL_CANCELLED;
  const graphJob = await startGraph("chain", prompt);
  await eventually(async () =>
    (await stepJobs(prompt)).slow?.some((j) => j.state === "JOB_STATE_RUNNING") ? true : undefined,
  );
  const cancelled = await t.cli(["jobs", "cancel", graphJob, "--reason", "changed my mind"]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  const watched = await t.cli(["jobs", "watch", graphJob]);
  assert.equal(watched.code, 4, watched.stdout + watched.stderr);
  const slow = await eventually(async () =>
    (await stepJobs(prompt)).slow?.find((j) => j.state === "JOB_STATE_CANCELLED"),
  );
  assert.ok(slow);
  assert.equal((await stepJobs(prompt)).finish, undefined);
});

void test("a run keeps the agent versions it started with when a new version is published mid-run", async (ctx) => {
  const prompt = "pinned-run";
  const graphJob = await startGraph("chain", prompt);
  await eventually(async () =>
    (await stepJobs(prompt)).slow?.some((j) => j.state === "JOB_STATE_RUNNING") ? true : undefined,
  );
  const changed = mkdtempSync(path.join(os.tmpdir(), "oz0-crash-graphs-v2-"));
  ctx.after(() => rmSync(changed, { recursive: true, force: true }));
  cpSync(plugin, changed, { recursive: true });
  writeFileSync(path.join(changed, "prompts/finish.md"), "You are finish. Say it differently.\n");
  const installed = await t.cli(["plugin", "install", changed]);
  assert.equal(installed.code, 0, installed.stderr);
  assert.match(installed.stdout, /published agent finish v2/);
  await waitToSucceed(graphJob);
  const finish = (await stepJobs(prompt)).finish ?? [];
  assert.equal(finish.length, 1);
  assert.equal(finish[0]!.agent.version ?? 0, 1, "the finish step ran the version pinned when the run started");
});
