// A graph's manager agent, on the real stack: the `flaky` step's first
// session fails (its model call errors), which is a step_error control
// event; the graph names `boss` as its managerAgent, so the orchestrator
// runs boss as a job of its own, offering it the retry/skip/abort/answer
// tools, and its tool call decides what the run does. The manager runs only
// on that event: a run whose steps all succeed never starts a boss job.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { agentOf } from "./support/graph-agents.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

/** The manager's decision per run, by a word of the run's prompt (the manager sees it in the redacted bag). */
const DECISIONS: Record<string, ScriptedTurn> = {
  "retry-case": { toolCalls: [{ name: "retry", input: {} }] },
  "skip-case": { toolCalls: [{ name: "skip", input: {} }] },
  "abort-case": { toolCalls: [{ name: "abort", input: { reason: "the boss said stop" } }] },
  "silent-case": { text: "I will not decide" },
  // Slow, so the orchestrator is restarted while the manager's model call is in flight (before it decides)...
  "restart-early-case": { toolCalls: [{ name: "retry", input: {} }], delayMs: 3_000 },
  // ...or after its decision was answered, while its session still runs.
  "restart-late-case": { toolCalls: [{ name: "skip", input: {} }] },
  // Slow, so the run is cancelled while the manager still decides.
  "cancel-case": { toolCalls: [{ name: "retry", input: {} }], delayMs: 15_000 },
};

/** Run prompts whose manager asked the model for its second turn (after deciding). */
const managerSecondTurns: string[] = [];

/** How many sessions of `flaky` asked the model, per run prompt: only the first one fails. */
const flakyCalls = new Map<string, number>();
/** The inputs the manager was given, to check what it saw. */
const managerInputs: string[] = [];

function caseOf(input: string): string {
  return Object.keys(DECISIONS).find((k) => input.includes(k)) ?? "calm-case";
}

function turn(agent: string, input: string, turnIndex: number): ScriptedTurn {
  switch (agent) {
    case "flaky": {
      if (caseOf(input) === "calm-case") return { text: "flaky done" };
      const n = (flakyCalls.get(input) ?? 0) + 1;
      flakyCalls.set(input, n);
      // 400: not retried by the harness or the proxy, so the session (and the step) fails.
      return n === 1
        ? {
            fail: {
              status: 400,
              body: { type: "error", error: { type: "invalid_request_error", message: "scripted failure" } },
            },
          }
        : { text: "flaky done" };
    }
    case "boss":
      if (turnIndex === 0) managerInputs.push(input);
      if (turnIndex === 0) return DECISIONS[caseOf(input)]!;
      managerSecondTurns.push(input);
      return caseOf(input) === "restart-late-case" ? { text: "decided", delayMs: 3_000 } : { text: "decided" };
    default:
      return { text: `${agent} done` };
  }
}

let t: TestStack;
let plugin: string | undefined;

function writePlugin(): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-manager-plugin-"));
  for (const d of ["agents", "prompts", "graphs"]) mkdirSync(path.join(dir, d));
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    [
      "name: manager-graphs",
      "version: 0.1.0",
      "harnesses:",
      "  - name: fake",
      '    command: ["oz0-fake-harness"]',
      "    permissions: true",
      "    capabilities: [permissions, runtime_tools]",
      "    tools: [read_file, write_file, run_command]",
      "agents: [agents/flaky.yaml, agents/after.yaml, agents/boss.yaml]",
      "graphs: [graphs/managed.yaml]",
      "",
    ].join("\n"),
  );
  for (const name of ["flaky", "after", "boss"]) {
    writeFileSync(path.join(dir, "prompts", `${name}.md`), `You are ${name}.\n`);
    writeFileSync(
      path.join(dir, "agents", `${name}.yaml`),
      [
        `name: ${name}`,
        `description: The ${name} agent of the manager test graph.`,
        "runtime: harness:fake",
        "model: { primary: anthropic/claude-sonnet-5-5 }",
        `instructions: prompts/${name}.md`,
        "limits: { max_steps: 5, timeout: 10m }",
        "harness:",
        "  tools: [read_file]",
        "",
      ].join("\n"),
    );
  }
  writeFileSync(
    path.join(dir, "graphs", "managed.yaml"),
    [
      "format: oz0.graph/v1",
      "kind: harness",
      "name: managed",
      "id: harness:managed",
      "managerAgent: boss",
      "root:",
      "  - { kind: agent, id: agent:flaky, agent: flaky }",
      "  - { kind: agent, id: agent:after, agent: after }",
      "",
    ].join("\n"),
  );
  return dir;
}

interface JobJson {
  id: string;
  agent: { name: string };
  input: string;
  state: string;
}

async function jobs(): Promise<JobJson[]> {
  const listed = await t.cli(["jobs", "list", "--limit", "500", "--json"]);
  assert.equal(listed.code, 0, listed.stderr);
  return listed.stdout
    .trim()
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as JobJson);
}

/** Runs the graph to its end; returns the watch output, its exit code and the run's jobs per agent. */
async function runManaged(
  prompt: string,
  meanwhile?: () => Promise<void>,
): Promise<{ code: number; out: string; byAgent: Record<string, JobJson[]> }> {
  const started = await t.cli(["run", "managed", prompt, "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const id = /graph_\w+/.exec(started.stdout)?.[0];
  assert.ok(id, started.stdout);
  await meanwhile?.();
  const watched = await t.cli(["jobs", "watch", id]);
  const byAgent: Record<string, JobJson[]> = {};
  // Step jobs' input starts with the run's prompt; the manager's input holds it in the bag.
  for (const j of await jobs())
    if (!j.id.startsWith("graph_") && j.input.includes(prompt)) (byAgent[j.agent.name] ??= []).push(j);
  return { code: watched.code, out: watched.stdout + watched.stderr, byAgent };
}

before(async () => {
  t = await startTestStack({ pick: ({ input, turn: n, request }) => turn(agentOf(request), input, n) });
  plugin = writePlugin();
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stderr + installed.stdout);
});

after(async () => {
  await t?.close();
  if (plugin) rmSync(plugin, { recursive: true, force: true });
});

void test("the manager retries the failed step, which then succeeds", async () => {
  const r = await runManaged("retry-case one");
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /manager boss decides step_error as job job_\w+/);
  assert.match(r.out, /after done/);
  assert.equal(r.byAgent.boss?.length, 1, "the manager ran once, on the step error");
  assert.deepEqual(r.byAgent.flaky?.map((j) => j.state).sort(), ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"]);
  assert.equal(r.byAgent.after?.length, 1);
  const seen = managerInputs.find((i) => i.includes("retry-case one"))!;
  assert.match(seen, /"kind": "step_error"/);
  assert.match(seen, /"step": "agent:flaky"/);
  assert.match(seen, /"error_code": "STEP_FAILED"/);
  // The step's error text (which names the failed job) is not given to the manager: only its code.
  assert.doesNotMatch(seen, /scripted failure|ended failed/);
});

void test("the manager skips the failed step: the run goes on without it", async () => {
  const r = await runManaged("skip-case two");
  assert.equal(r.code, 0, r.out);
  assert.equal(r.byAgent.boss?.length, 1);
  assert.equal(r.byAgent.flaky?.length, 1, "a skipped step is not run again");
  assert.equal(r.byAgent.after?.length, 1);
});

void test("the manager aborts: the run fails with its reason and later steps never run", async () => {
  const r = await runManaged("abort-case three");
  assert.notEqual(r.code, 0, r.out);
  assert.match(r.out, /RUN_ABORTED.*the boss said stop/);
  assert.equal(r.byAgent.boss?.length, 1);
  assert.equal(r.byAgent.after, undefined);
});

void test("a manager that makes no decision fails the run with a clear message", async () => {
  const r = await runManaged("silent-case four");
  assert.notEqual(r.code, 0, r.out);
  assert.match(
    r.out,
    /MANAGER_FAILED.*manager agent boss \(job job_\w+\) ended succeeded without calling retry, skip, abort or answer/,
  );
  assert.equal(r.byAgent.after, undefined);
});

void test("an orchestrator killed while the manager decides resumes the run with the same manager job and its decision", async () => {
  const r = await runManaged("restart-early-case six", async () => {
    await eventually(async () => (managerInputs.some((i) => i.includes("restart-early-case six")) ? true : undefined));
    // The manager's model call is in flight: its decision reaches the restarted orchestrator.
    await t.restartOrchestrator();
  });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /manager boss still decides step_error as job job_\w+/);
  assert.equal(r.byAgent.boss?.length, 1, "the manager is not asked again after the restart");
  assert.equal(r.byAgent.boss?.[0]?.state, "JOB_STATE_SUCCEEDED");
  assert.deepEqual(
    r.byAgent.flaky?.map((j) => j.state).sort(),
    ["JOB_STATE_FAILED", "JOB_STATE_SUCCEEDED"],
    "retried as decided",
  );
  assert.equal(r.byAgent.after?.length, 1);
  const boss = await t.cli(["jobs", "watch", r.byAgent.boss![0]!.id]);
  assert.match(boss.stdout, /◆ retry: \{\} ✓/, "the decision is in the manager job's events");
});

void test("an orchestrator killed after the manager decided reads the recorded decision", async () => {
  const r = await runManaged("restart-late-case seven", async () => {
    await eventually(async () =>
      managerSecondTurns.some((i) => i.includes("restart-late-case seven")) ? true : undefined,
    );
    // skip was answered and recorded; the manager's session is still on its next turn.
    await t.restartOrchestrator();
  });
  assert.equal(r.code, 0, r.out);
  assert.equal(r.byAgent.boss?.length, 1);
  assert.equal(r.byAgent.flaky?.length, 1, "skipped as decided before the restart, not run again");
  assert.equal(r.byAgent.after?.length, 1);
});

void test("a run cancelled while the manager decides ends cancelled, and so does the manager's job", async () => {
  let graphJob = "";
  const r = await runManaged("cancel-case eight", async () => {
    await eventually(async () => (managerInputs.some((i) => i.includes("cancel-case eight")) ? true : undefined));
    const listed = (await jobs()).find((j) => j.id.startsWith("graph_") && j.input.includes("cancel-case eight"));
    assert.ok(listed);
    graphJob = listed.id;
    const cancelled = await t.cli(["jobs", "cancel", graphJob, "--reason", "changed plans"]);
    assert.equal(cancelled.code, 0, cancelled.stderr);
  });
  assert.notEqual(r.code, 0, r.out);
  assert.equal((await jobs()).find((j) => j.id === graphJob)?.state, "JOB_STATE_CANCELLED");
  assert.equal(r.byAgent.boss?.length, 1);
  // Before, its decision was waited for (and then dropped): the model call ran on, and a manager waiting for
  // a person's approval kept the run from ending for as long as nobody answered.
  const boss = r.byAgent.boss![0]!.id;
  const ended = await eventually(async () => {
    const state = (await jobs()).find((j) => j.id === boss)?.state;
    return state === "JOB_STATE_RUNNING" || state === "JOB_STATE_PENDING" ? undefined : state;
  });
  assert.equal(ended, "JOB_STATE_CANCELLED", "the manager's job is cancelled with the run");
  assert.equal(r.byAgent.flaky?.length, 1, "the retry it was deciding never ran");
  assert.equal(r.byAgent.after, undefined);
});

void test("a run without a control event never starts the manager", async () => {
  const r = await runManaged("calm-case five");
  assert.equal(r.code, 0, r.out);
  assert.equal(r.byAgent.boss, undefined);
  assert.equal(r.byAgent.flaky?.length, 1);
  assert.equal(r.byAgent.after?.length, 1);
});
