// The seed's graph examples, run for real: examples/plugins/support-graphs is
// installed into the real four-service stack, each agent step is a job of the
// fake harness through the sandbox (its model the scripted one), and the
// custom ParseEmail step runs in the sandbox through the step runner.
import { bearerInterceptor } from "@oz0/serving";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { parseDefinitionYaml } from "@oz0/graph";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { EventsService } from "@oz0/proto/oz0/events/v1/events_pb";
import { agentOf } from "./support/graph-agents.js";
import { eventually, packageDir, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(repoRoot, "examples/plugins/support-graphs");

function exampleTurn(agent: string, input: string): ScriptedTurn {
  switch (agent) {
    case "email-triage":
      return { text: input.includes("crash") ? "bug_report" : "other" };
    case "writer":
      return { text: `Re: ${input.split("\n")[0]}` };
    case "search":
      return { text: "sources" };
    case "summarize":
      return { text: input.includes("sources") ? "summary of sources" : "summary of nothing" };
    case "drafter":
      return { text: "draft" };
    case "editor":
      return { text: `final (${input.includes("Previous output") ? "edited" : "blank"})` };
    case "coder":
      return { text: input.includes("Feedback:") ? "patch with better names" : "patch" };
    case "reviewer":
      return { text: input.includes("better names") ? "break" : "again\nname the variable better" };
    default:
      return { text: `no script for ${agent}` };
  }
}

let t: TestStack;

before(async () => {
  t = await startTestStack({ pick: ({ input, request }) => exampleTurn(agentOf(request), input) });
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

void test("graphs from the plugin are versioned and drawn by oz0 graph show", async () => {
  const shown = await t.cli(["graph", "show", "inbox"]);
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /^inbox v1 \(plugin support-graphs 0\.1\.0\)/);
  assert.match(shown.stdout, /harness:inbox/);
  assert.match(shown.stdout, /agent:email-triage/);
  const mermaid = await t.cli(["graph", "show", "article", "--mermaid"]);
  assert.equal(mermaid.code, 0, mermaid.stderr);
  assert.match(mermaid.stdout, /^flowchart TD/);
  assert.match(mermaid.stdout, /editor/);
  // One name space: the graphs are listed with the agents, runtime graph.
  const listed = await t.cli(["agents", "list"]);
  assert.match(listed.stdout, /inbox\s+v1\s+graph/);
  // The same content keeps the version.
  const again = await t.cli(["plugin", "install", plugin]);
  assert.equal(again.code, 0, again.stderr);
  assert.match((await t.cli(["graph", "show", "inbox"])).stdout, /^inbox v1 /);
  const agent = await t.cli(["graph", "show", "writer"]);
  assert.equal(agent.code, 1);
  assert.match(agent.stderr, /writer is an agent, not a graph/);
});

void test("email triage: the evaluator's label picks the arm, and each step is a job of its own", async () => {
  const run = await t.cli(["run", "inbox", "the app crashes on start"]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  assert.match(run.stdout, /agent:email-triage \/0\/eval started/);
  assert.match(
    run.stdout,
    /agent:email-triage \/0\/eval started\n {2}agent:email-triage \/0\/eval: runs as job job_\w+\n/,
    "one line each, no blank lines between",
  );
  assert.match(run.stdout, /Re: the app crashes on start/);
  const jobs = await t.cli(["jobs", "list", "--json"]);
  const list = jobs.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { agent: { name: string }; state: string });
  assert.ok(list.some((j) => j.agent.name === "inbox" && j.state === "JOB_STATE_SUCCEEDED"));
  assert.ok(list.some((j) => j.agent.name === "email-triage"));
  assert.ok(list.some((j) => j.agent.name === "writer"));
  // Lifecycle events reach the events service, with the run and the step path.
  const graphJob = /job (graph_\w+) succeeded/.exec(run.stdout)?.[1];
  assert.ok(graphJob, run.stdout);
  const events = createClient(
    EventsService,
    createGrpcTransport({ baseUrl: t.stack.urls.events, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
  );
  const seen = await eventually(async () => {
    const types: string[] = [];
    for await (const r of events.watch({ jobId: graphJob, untilCaughtUp: true })) {
      if (r.event?.graphRunId === graphJob)
        types.push(`${r.event.type}${r.event.graphStepId ? ` ${r.event.graphStepId}` : ""}`);
    }
    return types.includes("graph.run_completed") ? types : undefined;
  });
  assert.ok(seen.includes("graph.run_started"), seen.join());
  assert.ok(seen.includes("graph.step_started agent:email-triage@0.eval"), seen.join());
  assert.ok(seen.includes("graph.step_completed agent:email-triage@0.eval"), seen.join());

  // Its usage is its step jobs': each listed, the sums over them.
  const usage = await t.cli(["usage", graphJob, "--json"]);
  assert.equal(usage.code, 0, usage.stderr);
  const metered = JSON.parse(usage.stdout) as {
    total: { calls: string; inputTokens: string };
    agents: { agent: string; usage: { calls: string } }[];
    steps: { jobId: string; step: string; agent: { name: string }; usage: { calls: string; inputTokens: string } }[];
  };
  assert.deepEqual(
    metered.steps.map((s) => [s.step, s.agent.name]),
    [
      ["/0/eval", "email-triage"],
      ["/0/arm0/0", "writer"],
    ],
  );
  assert.deepEqual(
    metered.agents.map((a) => [a.agent, a.usage.calls]),
    [
      ["email-triage", "1"],
      ["writer", "1"],
    ],
  );
  assert.equal(metered.total.calls, "2");
  assert.equal(
    Number(metered.total.inputTokens),
    metered.steps.reduce((sum, s) => sum + Number(s.usage.inputTokens), 0),
  );
  for (const step of metered.steps) {
    const own = JSON.parse((await t.cli(["usage", step.jobId, "--json"])).stdout) as { total: { inputTokens: string } };
    assert.equal(own.total.inputTokens, step.usage.inputTokens, "each step's figure is its job's own");
  }
  const table = await t.cli(["usage", graphJob]);
  assert.match(table.stdout, /^step \/0\/eval .* 1 calls .*job_\w+ \(email-triage v1\)$/m);
  assert.match(table.stdout, new RegExp(`^graph run ${graphJob} +2 calls`, "m"));
  const shown = await t.cli(["jobs", "show", graphJob]);
  assert.match(shown.stdout, /^ {2}cost {6}\$\d+\.\d{4}.*: 2 model calls over 2 step jobs, /m);
  assert.match(shown.stdout, /^ {2}started {3}\d{4}-.*\.\d{3}Z$/m);
});

void test("research and draft run in parallel and join before the editor", async () => {
  const run = await t.cli(["run", "article", "graphs", "--json"]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  assert.match(run.stdout, /final \(edited\)/);
  assert.match(run.stdout, /agent:summarize/);
  assert.match(run.stdout, /agent:drafter/);
});

void test("the coder/reviewer loop passes feedback and ends on break", async () => {
  const run = await t.cli(["run", "code", "fix the parser"]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  assert.match(run.stdout, /agent:reviewer \S+ \(iteration 1\) started/);
  assert.match(run.stdout, /agent:reviewer \S+ \(iteration 1\) finished, set output, reviewer, choice, feedback/);
  // The second round's coder read the reviewer's feedback.
  const second = /agent:coder \/0\/2\/body\/0\/0: runs as job (job_\w+)/.exec(run.stdout)?.[1];
  assert.ok(second, run.stdout);
  const shown = await t.cli(["jobs", "show", second, "--json"]);
  assert.match(shown.stdout, /patch with better names/);
  assert.match(run.stdout, /\nbreak\n/);
});

void test("the custom ParseEmail step runs in the sandbox through the step runner", async () => {
  const run = await t.cli(["run", "support", "Printer is on fire\nplease help"]);
  assert.equal(run.code, 0, run.stderr + run.stdout);
  assert.match(run.stdout, /step:parse-email \/0: runs as session ses_step_/);
  assert.match(run.stdout, /set subject, output, parsed_by/);
  assert.match(run.stdout, /\nother\n/);
});

void test("the README's graph section shows the example plugin's inbox graph, and its commands run", async () => {
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Graph harnesses"), readme.indexOf("## The API"));
  const yamlBlocks = [...section.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => m[1]!);
  const inbox = yamlBlocks.find((b) => b.includes("format: oz0.graph/v1"));
  assert.ok(inbox, "the section shows a graph definition");
  assert.deepEqual(
    parseDefinitionYaml(inbox),
    parseDefinitionYaml(readFileSync(path.join(plugin, "graphs/inbox.yaml"), "utf8")),
  );
  const commands =
    /```sh\n([\s\S]*?)```/
      .exec(section)?.[1]
      ?.split("\n")
      .filter((l) => l.startsWith("oz0 ")) ?? [];
  assert.equal(commands.length, 5);
  for (const line of commands) {
    const args = [...line.replace(/\s+#.*$/, "").matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2]!).slice(1);
    const result = await t.cli(args);
    assert.equal(result.code, 0, `${line}: ${result.stderr}`);
  }
});

void test("an invalid graph refuses the whole plugin, naming the unknown agent and the incomplete loop", async (ctx) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-bad-graph-"));
  ctx.after(() => rmSync(dir, { recursive: true, force: true }));
  mkdirSync(path.join(dir, "graphs"));
  writeFileSync(path.join(dir, "oz0-plugin.yaml"), "name: bad-graphs\nversion: 0.1.0\ngraphs: [graphs/bad.yaml]\n");
  writeFileSync(
    path.join(dir, "graphs/bad.yaml"),
    [
      "format: oz0.graph/v1",
      "kind: harness",
      "name: bad",
      "id: harness:bad",
      "root:",
      "  - { kind: agent, id: agent:ghost, agent: ghost }",
      "  - { kind: loop, id: loop:x, body: [{ kind: agent, id: agent:writer, agent: writer }] }",
      "",
    ].join("\n"),
  );
  const refused = await t.cli(["plugin", "install", dir]);
  assert.equal(refused.code, 1, refused.stdout);
  assert.match(refused.stderr, /graphs\/bad\.yaml: graph "bad" is invalid/);
  assert.match(refused.stderr, /ghost/);
  assert.match(refused.stderr, /LOOP_MISSING_UNTIL/);
  assert.doesNotMatch((await t.cli(["plugin", "list"])).stdout, /bad-graphs/);
});

void test("an agent named like an installed graph is refused: agents and graphs share one name space", async (ctx) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-shadowed-agent-"));
  ctx.after(() => rmSync(dir, { recursive: true, force: true }));
  for (const d of ["agents", "prompts"]) mkdirSync(path.join(dir, d));
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    [
      "name: inbox-agent",
      "version: 0.1.0",
      "harnesses:",
      "  - name: fake",
      '    command: ["oz0-fake-harness"]',
      "    tools: [read_file]",
      "agents: [agents/inbox.yaml]",
      "",
    ].join("\n"),
  );
  writeFileSync(path.join(dir, "prompts", "inbox.md"), "You read the inbox.\n");
  writeFileSync(
    path.join(dir, "agents", "inbox.yaml"),
    [
      "name: inbox",
      "description: An agent named like the example plugin's inbox graph.",
      "runtime: harness:fake",
      "model: { primary: anthropic/claude-sonnet-5-5 }",
      "instructions: prompts/inbox.md",
      "harness:",
      "  tools: [read_file]",
      "",
    ].join("\n"),
  );
  // The graph was installed first (before()): `oz0 run inbox` runs it, so an agent of that name could never run.
  const refused = await t.cli(["plugin", "install", dir]);
  assert.equal(refused.code, 1, refused.stdout);
  assert.match(refused.stderr, /agents\/inbox\.yaml: field \/name: "inbox" is already a graph/);
  assert.doesNotMatch((await t.cli(["plugin", "list"])).stdout, /inbox-agent/);
});
