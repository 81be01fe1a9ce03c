// When the node cannot collect a session's artifacts, the job says why. A
// working directory holding a repository of its own with no commit (a broken
// `git clone`, or a harness that means it) makes the snapshot's `git add`
// fail; the orchestrator dropped the node's reason, and the operator saw "no
// artifacts" with no why (found by an attacker review).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;

function pick({ turn }: { turn: number }): ScriptedTurn {
  if (turn > 0) return { text: "done" };
  const command = "mkdir -p sub/.git/objects sub/.git/refs/heads && echo 'ref: refs/heads/main' > sub/.git/HEAD";
  return { toolCalls: [{ name: "run_command", input: { command } }] };
}

before(async () => {
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
  const repo = await makePluginRepo({
    agents: { nester: fakeAgentYaml({ name: "nester", tools: ["run_command"] }) },
  });
  assert.equal((await t.cli(["plugin", "install", repo])).code, 0);
});

after(async () => {
  await t?.close();
});

void test("the job's output says why its artifacts were not collected", async () => {
  const run = await t.cli(["run", "nester", "leave a broken repository"]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(
    run.stdout,
    /^artifacts: not collected: the patch could not be made .*: git add failed: error: 'sub\/'/m,
  );
  const watched = await t.cli(["jobs", "watch", /job (job_\w+)/.exec(run.stdout)![1]!, "--json"]);
  const event = watched.stdout
    .split("\n")
    .filter((line) => line.includes('"artifacts"'))
    .map((line) => JSON.parse(line) as { artifacts?: { error?: string } })[0];
  assert.match(event?.artifacts?.error ?? "", /^the patch could not be made .*: git add failed/);
});
