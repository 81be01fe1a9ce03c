// Issue 5's acceptance on the real stack (the four services on loopback, the
// fake harness under the sandbox, the scripted model): every path of the tool
// policy, hooks and approvals, and harnesses that try to bypass it. The
// scripted model answers its second turn with what it read in the tool
// results ("saw: …"), so what reached the model is in the job's result.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import {
  commitAll,
  eventually,
  fakeAgentYaml,
  startTestStack,
  type FakeAgentOptions,
  type TestStack,
} from "./support/test-stack.js";
import { ARTIFACTS_WITHHELD } from "../src/jobs/job-artifacts.js";
import { holdingHook } from "./support/holding-hook.js";
import { toolResults } from "./support/tool-results.js";

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks");

/** This file's agents: each describes itself by its name, reads prompts/p.md and takes five steps at most. */
const agent = (options: FakeAgentOptions): string =>
  fakeAgentYaml({ description: options.name, instructions: "prompts/p.md", limits: { maxSteps: 5 }, ...options });

const AGENTS: Record<string, string> = {
  limited: agent({ name: "limited", tools: ["read_file"] }),
  guarded: agent({
    name: "guarded",
    tools: ["read_file", "write_file", "run_command"],
    extra: `hooks:
  - name: guard
    match: fake.run_command
    command: ["node", "hooks/guard.mjs"]
    timeout: 30s
`,
  }),
  careful: agent({ name: "careful", tools: ["run_command"], requiresApproval: ["run_command"] }),
  hasty: agent({
    name: "hasty",
    tools: ["run_command"],
    requiresApproval: ["run_command"],
    extra: "approvals:\n  timeout: 2s\n",
  }),
  patient: agent({
    name: "patient",
    tools: ["run_command"],
    requiresApproval: ["run_command"],
    extra: "approvals:\n  timeout: 15s\n",
  }),
  stuck: agent({
    name: "stuck",
    tools: ["run_command"],
    extra: 'hooks:\n  - name: slow-guard\n    command: ["node", "hooks/hang.mjs"]\n    timeout: 1s\n',
  }),
  // Its hook holds every call until it is killed (at 5 minutes): only a cancel ends the wait early.
  stalled: agent({
    name: "stalled",
    tools: ["run_command"],
    extra: 'hooks:\n  - name: holding-guard\n    command: ["node", "hooks/hold.mjs"]\n    timeout: 5m\n',
  }),
  // The same hook, in a session whose deadline comes first: the session's end, not the hook's timeout, ends the job.
  overdue: agent({
    name: "overdue",
    tools: ["run_command"],
    limits: { timeout: "3s" },
    extra: 'hooks:\n  - name: holding-guard\n    command: ["node", "hooks/hold.mjs"]\n    timeout: 5m\n',
  }),
  // The same hook, for a call whose harness dies as it asks (test/fixtures/hooks/asks-then-dies.mjs).
  "stalled-dying": agent({
    name: "stalled-dying",
    tools: ["run_command"],
    extra: 'hooks:\n  - name: holding-guard\n    command: ["node", "hooks/hold.mjs"]\n    timeout: 5m\n',
  }).replace("harness:fake", "harness:dies"),
  // The same hook for two calls asked at once (test/fixtures/hooks/parallel-harness.mjs), which reach the
  // orchestrator together. Its timeout is one a test outlives: a cancel waiting for it shows as the hook's denial.
  "stalled-pair": agent({
    name: "stalled-pair",
    tools: ["run_command"],
    extra: 'hooks:\n  - name: holding-guard\n    command: ["node", "hooks/hold.mjs"]\n    timeout: 20s\n',
  }).replace("harness:fake", "harness:parallel"),
  broken: agent({
    name: "broken",
    tools: ["run_command"],
    extra: 'hooks:\n  - name: crashing-guard\n    command: ["node", "hooks/crash.mjs"]\n',
  }),
  // The same agent on the test's own harnesses, which the plugin's manifest declares next to fake.
  parallel: agent({ name: "parallel", tools: ["run_command"], requiresApproval: ["run_command"] }).replace(
    "harness:fake",
    "harness:parallel",
  ),
  rogue: agent({ name: "rogue", tools: ["run_command"], requiresApproval: ["run_command"] }).replace(
    "harness:fake",
    "harness:rogue",
  ),
  flood: agent({ name: "flood", tools: ["run_command"], requiresApproval: ["run_command"] }).replace(
    "harness:fake",
    "harness:flood",
  ),
  // The attacker review's case: a rule allows with a changed input, and requires_approval still asks a person.
  forced: agent({
    name: "forced",
    tools: ["run_command"],
    requiresApproval: ["run_command"],
    extra: `hooks:
  - name: force-command
    match: fake.run_command
    decision: allow
    set_input: { command: "echo HOOK-CHOSEN-COMMAND-RAN" }
`,
  }),
};

/** How many calls of one session may wait for a person at once, in this file's orchestrator. */
const MAX_WAITING = 3;

const COMMANDS: Record<string, string> = {
  refused: "echo not-allowed-here",
  harmless: "echo harmless",
  delete: "rm -f notes.txt",
  rewrite: "echo plain",
  network: "curl http://example.invalid",
  deploy: "echo deploy",
  wait: "echo waited",
  shown: "echo MODEL-SHOWN-COMMAND",
};

function pick({ input, turn, request }: { input: string; turn: number; request: ScriptedRequest }): ScriptedTurn {
  if (turn > 0) return { text: `saw: ${toolResults(request)}` };
  // `hold PORT`: run as it is (the holding hook connects to the port).
  const command = input.startsWith("hold ") ? input : COMMANDS[input.split(" ")[0]!];
  if (command) return { toolCalls: [{ name: "run_command", input: { command } }] };
  return { text: `no script for ${input}` };
}

interface JobJson {
  id: string;
  state: string;
  resultText?: string;
  error?: string;
}

let t: TestStack;
let repo: string | undefined;

async function makeRepo(): Promise<string> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-hooks-repo-"));
  for (const sub of ["agents", "prompts", "hooks"]) mkdirSync(path.join(dir, sub));
  writeFileSync(path.join(dir, "prompts", "p.md"), "Run the command you are asked to run.\n");
  for (const hook of ["guard-commands.mjs", "hang.mjs", "crash.mjs", "hold.mjs"])
    copyFileSync(
      path.join(fixtures, hook),
      path.join(dir, "hooks", hook === "guard-commands.mjs" ? "guard.mjs" : hook),
    );
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    `name: hooked
version: 0.1.0
harnesses:
  - name: fake
    command: ["oz0-fake-harness"]
    permissions: true
    tools: [read_file, write_file, run_command]
  - name: parallel
    command: ["node", "${path.join(fixtures, "parallel-harness.mjs")}"]
    permissions: true
    tools: [run_command]
  - name: dies
    command: ["node", "${path.join(fixtures, "asks-then-dies.mjs")}"]
    permissions: true
    tools: [run_command]
  - name: rogue
    command: ["node", "${path.join(fixtures, "rogue-harness.mjs")}"]
    permissions: true
    tools: [run_command]
  - name: flood
    command: ["node", "${path.join(fixtures, "parallel-harness.mjs")}", "1", "2", "3", "4", "5"]
    permissions: true
    tools: [run_command]
hooks:
  - name: no-network
    match: "fake.*"
    when:
      - pointer: /command
        regex: "^curl "
    decision: deny
    reason: this plugin's agents do not reach the network
agents:
${Object.keys(AGENTS)
  .map((name) => `  - agents/${name}.yaml`)
  .join("\n")}
`,
  );
  for (const [name, yaml] of Object.entries(AGENTS)) writeFileSync(path.join(dir, "agents", `${name}.yaml`), yaml);
  await commitAll(dir, "plugin");
  return dir;
}

const jsonLines = (text: string): Record<string, unknown>[] =>
  text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, unknown>);

async function job(id: string): Promise<JobJson> {
  const shown = await t.cli(["jobs", "show", id, "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout) as JobJson;
}

async function events(id: string): Promise<Record<string, unknown>[]> {
  const watched = await t.cli(["jobs", "watch", id, "--json"]);
  return jsonLines(watched.stdout);
}

async function start(agentName: string, input: string): Promise<string> {
  const started = await t.cli(["run", agentName, input, "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  return started.stdout.trim();
}

/** The call ids waiting for a person in this job, once there are `count`. */
async function waiting(jobId: string, count = 1): Promise<Record<string, unknown>[]> {
  return eventually(async () => {
    const list = await t.cli(["approvals", "list", "--job", jobId, "--json"]);
    const found = jsonLines(list.stdout);
    return found.length >= count ? found : undefined;
  }, `${count} call(s) of job ${jobId} waiting for a person`);
}

async function finished(jobId: string): Promise<JobJson> {
  await t.cli(["jobs", "watch", jobId]);
  return job(jobId);
}

async function runToEnd(agentName: string, input: string): Promise<JobJson> {
  return finished(await start(agentName, input));
}

const decisions = (all: Record<string, unknown>[]): Record<string, unknown>[] =>
  all.flatMap((e) => (e.permissionDecision ? [e.permissionDecision as Record<string, unknown>] : []));

before(async () => {
  t = await startTestStack({ pick, orchestratorEnv: { OZ0_MAX_WAITING_APPROVALS: String(MAX_WAITING) } });
  repo = await makeRepo();
  // Its agents' command hooks run on the orchestrator's host: not installed without the admin's say-so.
  const refused = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.equal(refused.code, 1);
  assert.match(
    refused.stderr,
    /plugin \S+ declares command hooks, guard \(agents\/\S+\.yaml\), .*they run on the orchestrator's host, .*install it with --allow-host-hooks/,
  );
  const installed = await t.cli(["plugin", "install", `file://${repo}`, "--allow-host-hooks"]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
  if (repo) rmSync(repo, { recursive: true, force: true });
});

void test("a tool outside harness.tools is refused without asking, and the model reads why", async () => {
  const done = await runToEnd("limited", "refused");
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.match(
    done.resultText ?? "",
    /^saw: Permission denied: tool run_command is not in this agent's harness\.tools \(read_file\); the call was refused/,
  );
  const [decision] = decisions(await events(done.id));
  assert.equal(decision?.decider, "DECIDER_POLICY");
  assert.equal(
    (await t.cli(["approvals", "list", "--job", done.id, "--all", "--json"])).stdout,
    "",
    "nobody was asked",
  );
});

void test("a command hook allows a call, and the hook's decision is on the job's record", async () => {
  const done = await runToEnd("guarded", "harmless");
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.match(done.resultText ?? "", /^saw: exit code 0\nharmless/);
  const [decision] = decisions(await events(done.id));
  assert.equal(decision?.decider, "DECIDER_HOOK");
  assert.equal(decision?.reason, "hook guard (agent guarded): looks harmless");
});

void test("a hook denies with a reason that reaches the model, and the tool does not run", async () => {
  const done = await runToEnd("guarded", "delete");
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.equal(
    done.resultText,
    "saw: Permission denied: hook guard (agent guarded): no deleting files (fake.run_command)",
  );
  const plugin = await runToEnd("guarded", "network");
  assert.equal(
    plugin.resultText,
    "saw: Permission denied: hook no-network (plugin hooked): this plugin's agents do not reach the network",
    "plugin hooks are asked before the agent's",
  );
});

void test("a hook's changed input is what the tool runs with", async () => {
  const done = await runToEnd("guarded", "rewrite");
  assert.match(done.resultText ?? "", /^saw: exit code 0\nrewritten/);
  const [decision] = decisions(await events(done.id));
  assert.deepEqual(decision?.input, { command: "echo rewritten" });
});

void test("a hook asks a person; the approval with a changed input runs that input", async () => {
  const jobId = await start("guarded", "deploy");
  const [approval] = await waiting(jobId);
  assert.equal(approval?.tool, "run_command");
  assert.match(String(approval?.reason), /hook guard \(agent guarded\): deploys need a person/);
  const shown = await job(jobId);
  assert.equal(shown.state, "JOB_STATE_WAITING");
  const approved = await t.cli([
    "approve",
    jobId,
    String(approval?.callId),
    "--input",
    '{"command":"echo approved-deploy"}',
  ]);
  assert.equal(approved.code, 0, approved.stderr);
  const done = await finished(jobId);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.match(done.resultText ?? "", /^saw: exit code 0\napproved-deploy/);
});

void test("a hook's changed input is the one the approval shows, beside the harness's, and the one a plain approve runs", async () => {
  const jobId = await start("forced", "shown");
  const [approval] = await waiting(jobId);
  assert.deepEqual(approval?.inputToRun, { command: "echo HOOK-CHOSEN-COMMAND-RAN" }, "what an approval runs");
  assert.deepEqual(approval?.input, { command: "echo MODEL-SHOWN-COMMAND" }, "what the harness asked");
  assert.equal(approval?.inputChangedBy, "hook force-command (agent forced)");
  const listed = await t.cli(["approvals", "list", "--job", jobId]);
  assert.ok(
    listed.stdout.includes(
      '{"command":"echo HOOK-CHOSEN-COMMAND-RAN"}  (input changed by hook force-command (agent forced); the harness asked {"command":"echo MODEL-SHOWN-COMMAND"})',
    ),
    listed.stdout,
  );
  const approved = await t.cli(["approve", jobId, String(approval?.callId)]);
  assert.equal(approved.code, 0, approved.stderr);
  const done = await finished(jobId);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.match(
    done.resultText ?? "",
    /^saw: exit code 0\nHOOK-CHOSEN-COMMAND-RAN/,
    "the input shown is the one that ran",
  );
  const [asked] = decisions(await events(jobId));
  assert.equal(asked?.inputChangedBy, "hook force-command (agent forced)", "the job's record names the hook too");
});

void test("a session has at most OZ0_MAX_WAITING_APPROVALS calls waiting for a person: the ones beyond are refused, and the model reads why", async () => {
  const jobId = await start("flood", "go");
  const asked = await waiting(jobId, MAX_WAITING);
  for (const approval of asked) {
    const denied = await t.cli(["deny", jobId, String(approval.callId), "--reason", "one at a time"]);
    assert.equal(denied.code, 0, denied.stderr);
  }
  const done = await finished(jobId);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.deepEqual(
    done.resultText?.split(" ").sort(),
    ["call_1:denied", "call_2:denied", "call_3:denied", "call_4:denied", "call_5:denied"],
    "every call answered, in the order the answers came",
  );
  const all = decisions(await events(jobId));
  assert.deepEqual(
    all.filter((d) => d.pending).map((d) => d.callId),
    ["call_1", "call_2", "call_3"],
    "only the first three waited for a person",
  );
  const refused = all.filter((d) => d.decider === "DECIDER_RUNTIME");
  assert.deepEqual(
    refused.map((d) => d.callId),
    ["call_4", "call_5"],
  );
  for (const decision of refused) {
    assert.equal(decision.allow, undefined, "denied");
    assert.equal(
      decision.reason,
      "3 calls of this session already wait for a person, the most one session may have waiting at once (OZ0_MAX_WAITING_APPROVALS); this call was refused without asking anyone: ask again once those are answered",
    );
  }
  assert.equal(
    jsonLines((await t.cli(["approvals", "list", "--job", jobId, "--all", "--json"])).stdout).length,
    MAX_WAITING,
    "the refused calls never reached the approvers' queue",
  );
});

void test("requires_approval → deny: the person's reason reaches the model", async () => {
  const jobId = await start("careful", "wait");
  const [approval] = await waiting(jobId);
  const denied = await t.cli(["deny", jobId, String(approval?.callId), "--reason", "not on a Friday"]);
  assert.equal(denied.code, 0, denied.stderr);
  const done = await finished(jobId);
  assert.equal(done.resultText, "saw: Permission denied: not on a Friday");
  const again = await t.cli(["deny", jobId, String(approval?.callId), "--reason", "not on a Friday"]);
  assert.equal(again.code, 0, "the same answer twice is accepted once");
  assert.equal(decisions(await events(jobId)).filter((d) => !d.pending).length, 1, "recorded once");
  const different = await t.cli(["approve", jobId, String(approval?.callId)]);
  assert.equal(different.code, 1);
  assert.match(different.stderr, /already denied by .*; a different answer is refused/);
});

void test("an unanswered call times out at the agent's deadline and is denied (fail closed); a late answer is refused", async () => {
  const jobId = await start("hasty", "wait");
  const done = await finished(jobId);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.equal(
    done.resultText,
    "saw: Permission denied: nobody answered within 2s (approvals.timeout), so the call is denied",
  );
  const [record] = jsonLines((await t.cli(["approvals", "list", "--job", jobId, "--all", "--json"])).stdout);
  assert.equal(record?.state, "APPROVAL_STATE_TIMED_OUT");
  assert.equal(
    Date.parse(String(record?.deadline)) - Date.parse(String(record?.requestedAt)),
    2_000,
    "the deadline is on the record",
  );
  const late = await t.cli(["approve", jobId, String(record?.callId)]);
  assert.equal(late.code, 1);
  assert.match(late.stderr, /is timed out: the answer came too late and was not used/);
});

// Who may answer (approvals.approvers, prevent_self_approval) is tested with real people in people-and-approvals.test.ts.

void test("cancelling a job answers its waiting call cancelled, and a later answer says so", async () => {
  const jobId = await start("careful", "wait");
  const [approval] = await waiting(jobId);
  const modelCalls = t.model.requests.length;
  const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "changed plans"]);
  assert.equal(cancelled.code, 0, cancelled.stderr);
  assert.equal((await finished(jobId)).state, "JOB_STATE_CANCELLED");
  // The answer woke the harness, which asks its model again at once: its token was revoked first, so no call
  // reached the model (or was billed) after the cancel (operator review).
  assert.equal(t.model.requests.length, modelCalls, "no model call after the cancel");
  const answered = (await events(jobId)).filter((e) => e.permissionDecision);
  assert.equal(answered.length, 2, "asked, then answered cancelled");
  const [record] = jsonLines((await t.cli(["approvals", "list", "--job", jobId, "--all", "--json"])).stdout);
  assert.equal(record?.state, "APPROVAL_STATE_CANCELLED");
  const late = await t.cli(["approve", jobId, String(approval?.callId)]);
  assert.equal(late.code, 1);
  assert.match(late.stderr, /is cancelled: the answer came too late and was not used/);
});

void test("a hook that hangs or crashes denies the call", async () => {
  const hung = await runToEnd("stuck", "harmless");
  assert.equal(
    hung.resultText,
    "saw: Permission denied: hook slow-guard (agent stuck) did not answer within 1000 ms; the call is denied",
  );
  const crashed = await runToEnd("broken", "harmless");
  assert.equal(
    crashed.resultText,
    "saw: Permission denied: hook crashing-guard (agent broken) failed (exit code 3): guard: cannot reach the policy server; the call is denied",
  );
});

void test("cancelling a job while a hook decides its call stops the hook: the call ends cancelled, not at the hook's timeout", async () => {
  const { port, hook: holding, close } = await holdingHook();
  try {
    const jobId = await start("stalled", `hold ${port}`);
    // The hook runs: it holds the job's lock, which the cancel waited for until the hook's timeout.
    const hook = await holding;
    const hookEnded = new Promise((resolve) => hook.once("close", resolve));
    const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "changed plans"]);
    assert.equal(cancelled.code, 0, cancelled.stderr);
    await hookEnded;
    assert.equal((await finished(jobId)).state, "JOB_STATE_CANCELLED");
    const [decision] = decisions(await events(jobId));
    assert.equal(decision?.decider, "DECIDER_RUNTIME", JSON.stringify(decision));
    assert.equal(decision?.outcome, "OUTCOME_CANCELLED");
    assert.equal(decision?.reason, "the job was cancelled");
  } finally {
    close();
  }
});

// A call waiting for its hook does not stop the node's clock: the node ends the session at its deadline. Its exit
// was read only after the burst that asked was handled, which waited for the hook, so the job ran on until the
// orchestrator's own stop of an overdue session a minute later, and that waited for the hook's lock.
void test("a session that reaches its deadline while a hook decides its call ends at once, the hook stopped", async () => {
  const { port, hook, close } = await holdingHook();
  try {
    const jobId = await start("overdue", `hold ${port}`);
    const socket = await hook;
    const hookEnded = new Promise((resolve) => socket.once("close", resolve));
    const ended = await finished(jobId);
    await hookEnded;
    assert.equal(ended.state, "JOB_STATE_FAILED", JSON.stringify(ended));
    const [decision] = decisions(await events(jobId));
    assert.equal(decision?.outcome, "OUTCOME_CANCELLED", JSON.stringify(decision));
    assert.match(String(decision?.reason), /^the session ended before its call was decided \(deadline_exceeded: /);
  } finally {
    close();
  }
});

// The harness's exit was read only after the burst that asked was handled, and that waited for the hook: the job
// ran on until the hook's timeout (5 minutes here), and the call was the hook's denial.
void test("a harness that dies while a hook decides its call stops the hook: the call ends cancelled, saying why", async () => {
  const { port, hook, close } = await holdingHook();
  try {
    const jobId = await start("stalled-dying", `hold ${port}`);
    // The hook runs unless the exit came with the call; either way the job ends without waiting for it.
    let hookEnded: Promise<unknown> = Promise.resolve();
    void hook.then((socket) => (hookEnded = new Promise((resolve) => socket.once("close", resolve))));
    const ended = await finished(jobId);
    await hookEnded;
    assert.equal(ended.state, "JOB_STATE_FAILED", JSON.stringify(ended));
    assert.match(String(ended.error), /code 3/);
    const [decision] = decisions(await events(jobId));
    assert.equal(decision?.outcome, "OUTCOME_CANCELLED", JSON.stringify(decision));
    assert.equal(decision?.decider, "DECIDER_RUNTIME");
    assert.equal(
      decision?.reason,
      "the session ended before its call was decided (no_result: the harness exited (code 3) without writing a result)",
    );
  } finally {
    close();
  }
});

// The cancel stopped the hook deciding the first call, then waited for the job's lock while the second call, which
// came with the first, ran its hook to its timeout: the cancel took that long, and the call was the hook's denial.
void test("cancelling a job while a hook decides one of two calls asked at once runs no hook for the other", async () => {
  const hooks: net.Socket[] = [];
  const firstHook = Promise.withResolvers<net.Socket>();
  const server = net.createServer((socket) => {
    hooks.push(socket.on("error", () => undefined));
    firstHook.resolve(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const jobId = await start("stalled-pair", `hold ${(server.address() as net.AddressInfo).port}`);
    await firstHook.promise;
    const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "changed plans"]);
    assert.equal(cancelled.code, 0, cancelled.stderr);
    assert.equal((await finished(jobId)).state, "JOB_STATE_CANCELLED");
    const both = decisions(await events(jobId));
    assert.deepEqual(
      both.map((d) => [d.callId, d.decider, d.outcome, d.reason]),
      ["call_first", "call_second"].map((callId) => [
        callId,
        "DECIDER_RUNTIME",
        "OUTCOME_CANCELLED",
        "the job was cancelled",
      ]),
    );
    assert.equal(hooks.length, 1, "the second call's hook never ran");
  } finally {
    server.close();
  }
});

void test("two calls waiting at once are answered in reverse order, independently", async () => {
  const jobId = await start("parallel", "go");
  const both = await waiting(jobId, 2);
  const byCall = new Map(both.map((a) => [String(a.title), String(a.callId)]));
  const second = await t.cli(["approve", jobId, byCall.get("echo second")!]);
  assert.equal(second.code, 0, second.stderr);
  const left = await waiting(jobId);
  assert.deepEqual(
    left.map((a) => a.title),
    ["echo first"],
    "answering one leaves the other waiting",
  );
  assert.equal((await job(jobId)).state, "JOB_STATE_WAITING");
  const first = await t.cli(["deny", jobId, byCall.get("echo first")!, "--reason", "only the second"]);
  assert.equal(first.code, 0, first.stderr);
  const done = await finished(jobId);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.equal(done.resultText, "call_second:allowed call_first:denied");
  const all = await events(jobId);
  assert.equal(all.filter((e) => e.permissionRequested).length, 2, "nothing was asked again");
});

void test("a harness that runs a tool without asking, or runs a refused one, fails the job naming the rule", async () => {
  const unasked = await runToEnd("rogue", "unasked");
  assert.equal(unasked.state, "JOB_STATE_FAILED");
  assert.equal(
    unasked.error,
    "policy bypass: harness rogue ran tool call call_rogue without asking permission first (rule: every tool call asks first); the job was stopped",
  );
  const refused = await runToEnd("rogue", "refused-then-ran");
  assert.equal(refused.state, "JOB_STATE_FAILED");
  assert.equal(
    refused.error,
    "policy bypass: harness rogue ran delete_everything call call_rogue although it was denied (rule: only the tools in harness.tools run); the job was stopped",
  );
  const early = await runToEnd("rogue", "ran-before-answer");
  assert.equal(early.state, "JOB_STATE_FAILED");
  assert.match(
    early.error ?? "",
    /ran run_command call call_rogue while it still waited for a person \(rule: a call runs only once it is allowed\)/,
  );
  // What each rogue changed is not handed out: its file is in no artifact, and the job says why.
  for (const job of [unasked, refused, early]) {
    const stored = (await events(job.id)).flatMap((e) =>
      e.artifacts ? [e.artifacts as { artifacts?: unknown[]; error?: string }] : [],
    );
    assert.deepEqual(
      stored.map((a) => [a.artifacts ?? [], a.error]),
      [[[], ARTIFACTS_WITHHELD]],
      `${job.id}: ${JSON.stringify(stored)}`,
    );
  }
  // The control: the same harness, asking and waiting, passes, and its change is the job's.
  const jobId = await start("rogue", "polite");
  const [approval] = await waiting(jobId);
  assert.equal((await t.cli(["approve", jobId, String(approval?.callId)])).code, 0);
  assert.equal((await finished(jobId)).state, "JOB_STATE_SUCCEEDED");
  const [kept] = (await events(jobId)).flatMap((e) =>
    e.artifacts ? [e.artifacts as { artifacts: { name: string; path: string }[] }] : [],
  );
  const patch = kept?.artifacts.find((a) => a.name === "changes.patch");
  assert.ok(patch, JSON.stringify(kept));
  assert.match(readFileSync(patch.path, "utf8"), /rogue\.txt/);
});

void test("restart while calls wait: an approval after the restart completes its job, and a deadline is re-armed from the store", async () => {
  // Both jobs start before the one restart, then each is answered by the restarted orchestrator.
  const careful = await start("careful", "wait");
  const patient = await start("patient", "wait");
  const [approval] = await waiting(careful);
  const [timed] = await waiting(patient);
  assert.ok(timed?.deadline, "the deadline is on the record while the call waits");
  // Killed long before the 15s deadline, so only the restarted orchestrator can time the call out.
  await t.restartOrchestrator();
  const [still] = await waiting(careful);
  assert.equal(still?.callId, approval?.callId, "the record survived the restart");
  const approved = await t.cli(["approve", careful, String(approval?.callId)]);
  assert.equal(approved.code, 0, approved.stderr);
  const done = await finished(careful);
  assert.equal(done.state, "JOB_STATE_SUCCEEDED", done.error);
  assert.match(done.resultText ?? "", /^saw: exit code 0\nwaited/);
  const expired = await finished(patient);
  assert.equal(
    expired.resultText,
    "saw: Permission denied: nobody answered within 15s (approvals.timeout), so the call is denied",
  );
  assert.equal(decisions(await events(patient)).filter((d) => d.outcome === "OUTCOME_TIMED_OUT").length, 1);
});
