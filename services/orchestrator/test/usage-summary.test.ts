// `oz0 usage` without a job: what every job's model calls that started in a
// window used, per agent, as the LLM proxy metered them (SummarizeUsage, at
// the orchestrator and at the proxy). The window counts the calls of the
// jobs run in it, each agent's the sum of its jobs', and nothing before.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;

interface UsageJson {
  calls?: string;
  inputTokens?: string;
  outputTokens?: string;
  costUsd?: number;
}

interface SummaryJson {
  since: string;
  until: string;
  total?: UsageJson;
  agents?: { agent: string; usage?: UsageJson }[];
}

before(async () => {
  // Two turns a job: a text answer, so each job is one model call.
  t = await startTestStack({ pick: () => ({ text: "done" }), prices: { "*": { input: 3, output: 15 } } });
  const repo = await makePluginRepo({
    agents: { writer: fakeAgentYaml({ name: "writer" }), reviewer: fakeAgentYaml({ name: "reviewer" }) },
  });
  const installed = await t.cli(["plugin", "install", `file://${repo}`]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

async function run(agent: string): Promise<string> {
  const ran = await t.cli(["run", agent, `a task for ${agent}`, "--json"]);
  assert.equal(ran.code, 0, ran.stderr);
  const jobId = /"jobId":"(job_[^"]+)"/.exec(ran.stdout)?.[1];
  assert.ok(jobId, ran.stdout);
  return jobId;
}

async function jobCost(jobId: string): Promise<number> {
  const shown = await t.cli(["usage", jobId, "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return (JSON.parse(shown.stdout) as { total?: UsageJson }).total?.costUsd ?? 0;
}

async function summary(...args: string[]): Promise<SummaryJson> {
  const shown = await t.cli(["usage", ...args, "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout) as SummaryJson;
}

void test("usage over a window sums every job's calls per agent, and only the calls in it", async () => {
  const before = await run("writer");
  const start = new Date();
  const jobs = { writer: [await run("writer"), await run("writer")], reviewer: [await run("reviewer")] };
  const seen = await summary("--since", start.toISOString());
  assert.deepEqual(
    seen.agents?.map((a) => [a.agent, a.usage?.calls]),
    [
      ["reviewer", "1"],
      ["writer", "2"],
    ],
    "the job before the window is not counted",
  );
  for (const [agent, ids] of Object.entries(jobs)) {
    let cost = 0;
    for (const id of ids) cost += await jobCost(id);
    const summed = seen.agents?.find((a) => a.agent === agent)?.usage?.costUsd ?? 0;
    assert.ok(cost > 0 && Math.abs(summed - cost) < 1e-9, `${agent}: ${summed} against its jobs' ${cost}`);
  }
  assert.equal(seen.total?.calls, "3");
  // The default window (24 hours) holds the first job too.
  const day = await summary();
  assert.equal(day.agents?.find((a) => a.agent === "writer")?.usage?.calls, "3");
  // The root README's form: the last week.
  assert.deepEqual((await summary("--since", "7d")).total, day.total);
  assert.ok(await jobCost(before), "the first job was metered");
  // --until alone moves the whole window: the day before it.
  const moved = await summary("--until", "2020-01-02");
  assert.equal(moved.since, "2020-01-01T00:00:00Z");
  assert.deepEqual(moved.agents ?? [], []);
  // A window that ended before any job: nothing.
  const empty = await t.cli(["usage", "--since", "2020-01-01", "--until", "2020-01-02"]);
  assert.equal(empty.code, 0, empty.stderr);
  assert.match(
    empty.stdout,
    /^model calls started from 2020-01-01T00:00:00\.000Z to 2020-01-02T00:00:00\.000Z, every job\nnone: no agent called a model then\n$/,
  );
  // On a terminal, a row per agent and the sum.
  const table = await t.cli(["usage", "--since", start.toISOString()]);
  assert.match(table.stdout, /^agent reviewer +1 calls +0 failed/m);
  assert.match(table.stdout, /^agent writer +2 calls/m);
  assert.match(table.stdout, /^all agents +3 calls .*\$\d+\.\d{4}$/m);
});

void test("a window oz0 cannot read, or a job and a window at once, is a usage error that says what to give", async () => {
  const bad = await t.cli(["usage", "--since", "yesterday"]);
  assert.equal(bad.code, 2);
  assert.match(
    bad.stderr,
    /--since yesterday: give how long ago \(24h, 7d, 1h30m\) or a date, or a date and time with its zone/,
  );
  const empty = await t.cli(["usage", "--since", "0h"]);
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /the window from .* to .* is empty: give a --since before --until/);
  const backwards = await t.cli(["usage", "--since", "1h", "--until", "2h"]);
  assert.equal(backwards.code, 2);
  assert.match(backwards.stderr, /--since \(.*\) must come before --until/);
  // The orchestrator bounds what one request makes the proxy read again.
  const long = await t.cli(["usage", "--since", "500d"]);
  assert.equal(long.code, 1);
  assert.match(
    long.stderr,
    /SummarizeUsage sums at most 400 days at once, not 500: ask for shorter windows and add them up/,
  );
  const both = await t.cli(["usage", "job_x", "--since", "7d"]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /give a job or a window, not both/);
});
