// An agent's budget (harness.max_budget_usd) bounds its harness operations
// too. Each operation runs a scratch session with a token of its own; those
// tokens spend from the parent session's budget account at the LLM proxy, so
// a session that has spent its budget cannot go on spending through an
// operation (an attacker review: a $0.02 agent spent $0.19 that way). An
// agent that sets no budget gets the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { commitAll, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

/** A harness standing for any code in the session: it calls the model with its token until refused, then its operation. */
const HARNESS = String.raw`
import { createInterface } from "node:readline";
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const req = JSON.parse((await lines.next()).value);
out({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "spender", capabilities: { runtimeTools: true, structuredOutput: true } } });
const call = async () =>
  (await fetch(req.llm.anthropicBaseUrl + "/v1/messages", {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": req.llm.token, "anthropic-version": "2023-06-01", ...req.llm.headers },
    body: JSON.stringify({ model: "claude-sonnet-5-5", max_tokens: 20, messages: [{ role: "user", content: "hello there" }] }),
  })).status;
const statuses = [];
if (req.instructions.includes("## Harness operation:")) {
  for (let i = 0; i < 5; i++) statuses.push(await call());
  out({ result: { stopReason: "STOP_REASON_COMPLETED", text: "", structuredOutput: { statuses: statuses.join(",") } } });
} else {
  for (let i = 0; i < 20; i++) { const s = await call(); statuses.push(s); if (s !== 200) break; }
  out({ runtimeToolCall: { id: "op-1", name: "spend", input: { task: "spend more" } } });
  const answer = JSON.parse((await lines.next()).value);
  const operation = JSON.stringify(answer.runtimeToolResult.output ?? answer.runtimeToolResult.error);
  out({ result: { stopReason: "STOP_REASON_COMPLETED", text: "main " + statuses.join(",") + " | operation " + operation } });
}
process.exit(0);
`;

let t: TestStack;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-operation-budget-"));

before(async () => {
  // $100 per million tokens in and out: every call costs something; the agent has $0.02, one without a budget of
  // its own the orchestrator's default $0.03.
  t = await startTestStack({
    pick: () => ({ text: "ok" }),
    prices: { "*": { input: 100, output: 100 } },
    orchestratorEnv: { OZ0_DEFAULT_MAX_BUDGET_USD: "0.03" },
  });
  const repo = path.join(scratch, "repo");
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(repo, sub), { recursive: true });
  writeFileSync(path.join(repo, "harness.mjs"), HARNESS);
  writeFileSync(path.join(repo, "prompts", "p.md"), "Be frugal.\n");
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    'name: spend\nversion: 0.1.0\nharnesses:\n  - name: spender\n    command: ["node", "harness.mjs"]\n    capabilities: [runtime_tools, structured_output]\nagents:\n  - agents/frugal.yaml\n  - agents/unbudgeted.yaml\n',
  );
  const agent = (name: string, budget: string[]): string =>
    [
      `name: ${name}`,
      "description: Spends its budget, then calls an operation.",
      "runtime: harness:spender",
      "model: { primary: anthropic/claude-sonnet-5-5 }",
      "instructions: prompts/p.md",
      "limits: { timeout: 2m }",
      ...budget,
      "harness_operations:",
      "  - key: spend",
      "    description: Spends more.",
      "    instructions: Call the model.",
      "    result_schema: { type: object, properties: { statuses: { type: string } } }",
      "    timeout_ms: 60000",
      "",
    ].join("\n");
  writeFileSync(path.join(repo, "agents", "frugal.yaml"), agent("frugal", ["harness:", "  max_budget_usd: 0.02"]));
  // No budget of its own: the orchestrator's default (OZ0_DEFAULT_MAX_BUDGET_USD) bounds it.
  writeFileSync(path.join(repo, "agents", "unbudgeted.yaml"), agent("unbudgeted", []));
  await commitAll(repo, "plugin");
  const installed = await t.cli(["plugin", "install", `file://${repo}`, "--json"]);
  assert.equal(installed.code, 0, installed.stderr);
  // The default bounds the agent without a budget: nothing to warn of.
  assert.deepEqual((JSON.parse(installed.stdout) as { warnings: string[] }).warnings, []);
  // An agent on the SDK's fake harness whose budget holds no call at all.
  const fake = await makePluginRepo({
    name: "tiny",
    agents: { tiny: `${fakeAgentYaml({ name: "tiny" })}  max_budget_usd: 0.0001\n` },
  });
  const tiny = await t.cli(["plugin", "install", `file://${fake}`]);
  assert.equal(tiny.code, 0, tiny.stderr);
});

after(async () => {
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Runs the agent to its end: the statuses of its own calls, its operation's, and what the job cost. */
async function spend(agent: string): Promise<{ main: string; operation: string; cost: number }> {
  const run = await t.cli(["run", agent, "go", "--json"]);
  const resultLine = run.stdout.split("\n").find((l) => l.includes('"result"'));
  assert.ok(resultLine, `${run.stdout}\n${run.stderr}`);
  const text = (JSON.parse(resultLine) as { result: { text: string } }).result.text;
  const [, main, operation] = /^main ([\d,]+) \| operation (.*)$/.exec(text) ?? [];
  assert.ok(main && operation, text);
  const jobId = /"jobId":"(job_[^"]+)"/.exec(run.stdout)?.[1];
  assert.ok(jobId);
  const usage = await t.cli(["usage", jobId]);
  return { main, operation, cost: Number(/^job .*\$(\d+\.\d+)$/m.exec(usage.stdout)?.[1]) };
}

void test("a harness operation's calls spend from the agent's budget: once the session spent it, the operation is refused too", async () => {
  const { main, operation, cost } = await spend("frugal");
  assert.match(main, /^(200,)+402$/, "the session spent its budget and was refused");
  assert.match(operation, /"statuses":"402,402,402,402,402"/, "its operation could not spend past it");
  assert.ok(cost > 0 && cost <= 0.02, `the job cost $${cost}, past its $0.02 budget`);
});

void test("an agent without a budget of its own gets the orchestrator's default, its operations too", async () => {
  const { main, operation, cost } = await spend("unbudgeted");
  assert.match(main, /^(200,)+402$/, "the default budget refused the session once spent");
  assert.match(operation, /"statuses":"402,402,402,402,402"/, "its operation spends from the same account");
  assert.ok(cost > 0 && cost <= 0.03, `the job cost $${cost}, past the default $0.03`);
  // More than the $0.02 agent could: the default, not some other bound, refused it.
  const calls = (statuses: string): number => statuses.split(",").filter((s) => s === "200").length;
  const frugal = await spend("frugal");
  assert.ok(calls(main) > calls(frugal.main), `${main} (default $0.03) against ${frugal.main} ($0.02)`);
  // The job says what bound it, beside what it cost.
  const jobs = JSON.parse(
    (await t.cli(["jobs", "list", "--json", "--agent", "unbudgeted"])).stdout.split("\n")[0]!,
  ) as {
    id: string;
  };
  assert.match(
    (await t.cli(["jobs", "show", jobs.id])).stdout,
    /^ {2}cost {6}\$[\d.]+: .*\n {2}budget {4}\$0\.03 a session \(the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD: the agent sets none\)$/m,
  );
});

void test("a harness refused for its budget says so whole, with where the budget is raised", async () => {
  const run = await t.cli(["run", "tiny", "go", "--json"]);
  const jobId = /"jobId":"(job_[^"]+)"/.exec(run.stdout)?.[1];
  assert.ok(jobId, run.stdout + run.stderr);
  const shown = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as {
    state: string;
    error?: string;
  };
  assert.equal(shown.state, "JOB_STATE_FAILED");
  // The fake harness kept only 200 characters of it, which stopped before what to do (operator review).
  assert.match(
    shown.error ?? "",
    /HTTP 402 budget_exhausted: the session's budget of \$0\.0001 is exhausted .*; the session must end \(an operator raises it with the agent's harness\.max_budget_usd \(or, for an agent that sets none, the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD\)\)/,
  );
});

void test("each agent version says what a session of it may spend, and whose setting that is", async () => {
  const show = async (name: string): Promise<string> => (await t.cli(["agents", "show", name])).stdout;
  assert.match(await show("frugal"), /^# budget: \$0\.02 a session \(the agent's harness\.max_budget_usd\)$/m);
  assert.match(
    await show("unbudgeted"),
    /^# budget: \$0\.03 a session \(the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD: the agent sets none\)$/m,
  );
  const json = JSON.parse((await t.cli(["agents", "show", "unbudgeted", "--json"])).stdout) as Record<string, unknown>;
  assert.deepEqual([json.budgetUsd, json.budgetSource], [0.03, "BUDGET_SOURCE_ORCHESTRATOR_DEFAULT"]);
  const list = (await t.cli(["agents", "list"])).stdout;
  assert.match(list, /^frugal +v\d+ +harness:spender +\$0\.02 /m);
  assert.match(list, /^unbudgeted +v\d+ +harness:spender +\$0\.03 default /m);
});
