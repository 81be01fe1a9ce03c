// A rule broken, then the orchestrator killed before the session ends: the
// replica that follows the job again (here the restarted one) fails it with
// the rule and withholds what the session changed, as the one that saw the
// rule broken would have. The rogue harness runs a tool unasked, ignores the
// stop (the cancel and SIGTERM) and ends only when the test says, after the
// restart.
import assert from "node:assert/strict";
import { readdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { ARTIFACTS_WITHHELD } from "../src/jobs/job-artifacts.js";
import { eventually, installRoguePlugin, startTestStack, type TestStack } from "./support/test-stack.js";

const rogueHarness = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks", "stubborn-rogue.mjs");
const BYPASS =
  "policy bypass: harness rogue ran tool call call_rogue without asking permission first (rule: every tool call asks first); the job was stopped";

let t: TestStack;

before(async () => {
  // The stop's grace outlasts the restart: the session ends only when the test releases it.
  t = await startTestStack({
    pick: () => ({ text: "unused: the rogue harness calls no model" }),
    sandboxEnv: { OZ0_CANCEL_GRACE_MS: "120000" },
  });
  await installRoguePlugin(t, { name: "rogue", script: rogueHarness });
});

after(() => t?.close());

function findFile(dir: string, name: string): string | undefined {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isFile() && entry.name === name) return full;
    if (entry.isDirectory()) {
      const found = findFile(full, name);
      if (found) return found;
    }
  }
  return undefined;
}

interface JobJson {
  id: string;
  state: string;
  error?: string;
}

async function job(id: string): Promise<JobJson> {
  const shown = await t.cli(["jobs", "show", id, "--json"]);
  assert.equal(shown.code, 0, shown.stderr);
  return JSON.parse(shown.stdout) as JobJson;
}

void test("a rule broken before a restart still fails the job with it, and its changes stay withheld", async () => {
  const started = await t.cli(["run", "rogue", "break a rule", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  // The rule is stored (the job's error) while the session, told to stop, runs on.
  await eventually(async () => ((await job(jobId)).error === BYPASS ? true : undefined));
  await t.restartOrchestrator();
  // Its working directory, under the sandbox's root in the stack's home: where it wrote rogue.txt.
  const work = findFile(path.join(t.home, "sandbox"), "rogue.txt");
  assert.ok(work, "the rogue's working directory");
  writeFileSync(path.join(path.dirname(work), "release"), "");
  const ended = await eventually(async () => {
    const shown = await job(jobId);
    return shown.state === "JOB_STATE_FAILED" ? shown : undefined;
  });
  assert.equal(ended.error, BYPASS);
  const watched = await t.cli(["jobs", "watch", jobId, "--json"]);
  const artifacts = watched.stdout
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as { artifacts?: { artifacts?: unknown[]; error?: string } })
    .flatMap((e) => (e.artifacts ? [e.artifacts] : []));
  assert.deepEqual(
    artifacts.map((a) => [a.artifacts ?? [], a.error]),
    [[[], ARTIFACTS_WITHHELD]],
    "what the rogue wrote (rogue.txt) is in no artifact",
  );
});
