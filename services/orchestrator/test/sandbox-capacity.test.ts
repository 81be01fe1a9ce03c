// A job the sandbox has no room for waits (pending) and starts when a session
// ends, instead of failing.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

function pick({ input, turn }: { input: string; turn: number }): ScriptedTurn {
  if (turn > 0) return { text: `done: ${input}` };
  return { toolCalls: [{ name: "run_command", input: { command: "echo hello" } }] };
}

let t: TestStack;

before(async () => {
  t = await startTestStack({ pick, sandboxEnv: { OZ0_MAX_SESSIONS: "1" } });
  const repo = await makePluginRepo({
    agents: {
      careful: fakeAgentYaml({ name: "careful", requiresApproval: ["run_command"] }),
      quick: fakeAgentYaml({ name: "quick" }),
    },
  });
  const installed = await t.cli(["plugin", "install", repo]);
  assert.equal(installed.code, 0, installed.stderr);
});

after(async () => {
  await t?.close();
});

void test("a job waits while the sandbox is full, then runs", async () => {
  const first = (await t.cli(["run", "careful", "hold the only session", "--detach"])).stdout.trim();
  const callId = await eventually(async () => {
    const list = await t.cli(["approvals", "list", "--job", first, "--json"]);
    return list.stdout.trim()
      ? String((JSON.parse(list.stdout.split("\n")[0]!) as { callId: string }).callId)
      : undefined;
  });
  // The only session is taken: this one cannot start yet.
  const second = (await t.cli(["run", "quick", "wait for room", "--detach"])).stdout.trim();
  const shown = JSON.parse((await t.cli(["jobs", "show", second, "--json"])).stdout) as { state: string };
  assert.equal(shown.state, "JOB_STATE_PENDING");
  assert.equal((await t.cli(["approve", first, callId])).code, 0);
  const watchedFirst = await t.cli(["jobs", "watch", first]);
  assert.equal(watchedFirst.code, 0, watchedFirst.stdout);
  const watchedSecond = await t.cli(["jobs", "watch", second]);
  assert.equal(watchedSecond.code, 0, watchedSecond.stdout);
  assert.match(watchedSecond.stdout, /done: wait for room/);
  assert.match(
    watchedSecond.stdout,
    /… waiting for a sandbox node with free capacity/,
    "the waiting job said why it waited",
  );
  assert.equal(watchedSecond.stdout.match(/waiting for a sandbox node/g)?.length, 1, "said once, not per attempt");
});
