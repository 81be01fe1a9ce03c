// An agent's limits.max_steps bounds the model calls its session makes at the
// LLM proxy, not only the turns its harness reports. Code in the session (here
// a harness that reports nothing, standing for a tool call's script) calls the
// model with the session's token directly: with max_steps 3 its fourth call is
// refused, and so is a harness operation's scratch session's fourth, each
// session counted on its own. An agent without max_steps is not limited.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { commitAll, startTestStack, type TestStack } from "./support/test-stack.js";

/** Calls the model with the session's token until refused (at most 6 times), then its operation (outside one). */
const HARNESS = String.raw`
import { createInterface } from "node:readline";
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const req = JSON.parse((await lines.next()).value);
out({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "caller", capabilities: { runtimeTools: true, structuredOutput: true } } });
const calls = async () => {
  const statuses = [];
  let refusal = "";
  for (let i = 0; i < 6; i++) {
    const response = await fetch(req.llm.anthropicBaseUrl + "/v1/messages", {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": req.llm.token, "anthropic-version": "2023-06-01", ...req.llm.headers },
      body: JSON.stringify({ model: "claude-sonnet-5-5", max_tokens: 20, messages: [{ role: "user", content: "hello" }] }),
    });
    statuses.push(response.status);
    if (response.status !== 200) {
      const { error } = await response.json();
      refusal = error.type + ": " + error.message;
      break;
    }
    await response.text();
  }
  return statuses.join(",") + (refusal ? " " + refusal : "");
};
if (req.instructions.includes("## Harness operation:")) {
  out({ result: { stopReason: "STOP_REASON_COMPLETED", text: "", structuredOutput: { calls: await calls() } } });
} else {
  const main = await calls();
  out({ runtimeToolCall: { id: "op-1", name: "call_more", input: { task: "call the model" } } });
  const answer = JSON.parse((await lines.next()).value);
  const operation = JSON.stringify(answer.runtimeToolResult.output ?? answer.runtimeToolResult.error);
  out({ result: { stopReason: "STOP_REASON_COMPLETED", text: "main " + main + " | operation " + operation } });
}
process.exit(0);
`;

let t: TestStack;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-max-steps-proxy-"));

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "ok" }) });
  const repo = path.join(scratch, "repo");
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(repo, sub), { recursive: true });
  writeFileSync(path.join(repo, "harness.mjs"), HARNESS);
  writeFileSync(path.join(repo, "prompts", "p.md"), "Call the model.\n");
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    'name: steps\nversion: 0.1.0\nharnesses:\n  - name: caller\n    command: ["node", "harness.mjs"]\n    capabilities: [runtime_tools, structured_output]\nagents:\n  - agents/stepper.yaml\n  - agents/unlimited.yaml\n',
  );
  const agent = (name: string, limits: string): string =>
    [
      `name: ${name}`,
      "description: Calls the model itself, then an operation that does too.",
      "runtime: harness:caller",
      "model: { primary: anthropic/claude-sonnet-5-5 }",
      "instructions: prompts/p.md",
      `limits: { ${limits} }`,
      "harness_operations:",
      "  - key: call_more",
      "    description: Calls the model.",
      "    instructions: Call the model.",
      "    result_schema: { type: object, properties: { calls: { type: string } } }",
      "    timeout_ms: 60000",
      "",
    ].join("\n");
  writeFileSync(path.join(repo, "agents", "stepper.yaml"), agent("stepper", "max_steps: 3, timeout: 2m"));
  writeFileSync(path.join(repo, "agents", "unlimited.yaml"), agent("unlimited", "timeout: 2m"));
  await commitAll(repo, "plugin");
  const installed = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Runs the agent to its end: what its session's calls got, and what its operation's did. */
async function run(agent: string): Promise<{ main: string; operation: string }> {
  const ran = await t.cli(["run", agent, "go", "--json"]);
  const resultLine = ran.stdout.split("\n").find((l) => l.includes('"result"'));
  assert.ok(resultLine, `${ran.stdout}\n${ran.stderr}`);
  const text = (JSON.parse(resultLine) as { result: { text: string } }).result.text;
  const [, main, operation] = /^main (.*) \| operation (.*)$/.exec(text) ?? [];
  assert.ok(main && operation, text);
  return { main, operation };
}

void test("an agent's limits.max_steps is held at the LLM proxy: the session's own fourth model call is refused, and its operation's", async () => {
  const { main, operation } = await run("stepper");
  assert.match(
    main,
    /^200,200,200,402 model_calls_exhausted: the session has made 3 model calls, the most it may make \(3, its agent's limits\.max_steps\)/,
  );
  // A scratch session counts its own calls, as its harness counts its own turns.
  assert.match(operation, /"calls":"200,200,200,402 model_calls_exhausted: /);
  // Refused before they reached the model: three calls of each session did.
  const { requests } = t.model;
  assert.equal(requests.length, 6);
});

void test("an agent without limits.max_steps is not limited at the proxy", async () => {
  const before = t.model.requests.length;
  const { main, operation } = await run("unlimited");
  assert.equal(main, "200,200,200,200,200,200");
  assert.match(operation, /"calls":"200,200,200,200,200,200"/);
  assert.equal(t.model.requests.length - before, 12);
});
