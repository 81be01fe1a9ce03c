// When the node cannot collect all of a session's artifacts, the job says
// why. A working directory holding a repository of its own (a `git clone`,
// or a harness that means it) is left out of the patch: the node's git would
// have to read its refs, which the harness controls. The orchestrator once
// dropped the node's reason, and the operator saw "no artifacts" with no why
// (found by an attacker review).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { ScriptedTurn } from "@oz0/harness/testing";
import type { Browser } from "playwright-core";
import { launchBrowser, openConsole } from "./support/console-browser.js";
import { fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let browser: Browser | undefined;

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
  await browser?.close();
  await t?.close();
});

void test("the job's output says which of its artifacts were not collected, and why", async () => {
  const run = await t.cli(["run", "nester", "leave a broken repository"]);
  assert.equal(run.code, 0, run.stderr);
  const leftOut =
    /sub\/ left out of the patch: a folder with a \.git of its own is a separate repository, which the sandbox does not read/;
  assert.match(run.stdout, new RegExp(`^artifacts: ${leftOut.source}`, "m"));
  const watched = await t.cli(["jobs", "watch", /job (job_\w+)/.exec(run.stdout)![1]!, "--json"]);
  const event = watched.stdout
    .split("\n")
    .filter((line) => line.includes('"artifacts"'))
    .map((line) => JSON.parse(line) as { artifacts?: { error?: string } })[0];
  assert.match(event?.artifacts?.error ?? "", new RegExp(`^${leftOut.source}$`));
  // The console says it too, under the job's artifacts.
  browser = await launchBrowser();
  const page = await openConsole(browser, t.url, t.stack.ownerToken);
  await page.goto(`${t.url}/#/jobs/${/job (job_\w+)/.exec(run.stdout)![1]!}`);
  const shown = page.locator("p.artifacts-error");
  await shown.waitFor();
  assert.match(await shown.innerText(), leftOut);
});
