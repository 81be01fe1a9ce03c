// A harness under permissions whose events the node could not trust (here a
// second tool run announced and closed under an allowed call's id, which the
// host stops at the second result) made changes nobody can vouch for call by
// call: the job fails with the node's words and the node withholds what the
// session changed, as the orchestrator does for a rule it saw broken (attacker
// review: the job failed, yet its changes.patch handed out the unasked file).
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { installRoguePlugin, startTestStack, type TestStack } from "./support/test-stack.js";

const rogueHarness = path.join(
  path.dirname(fileURLToPath(import.meta.url)),
  "fixtures",
  "hooks",
  "replaying-rogue.mjs",
);

let t: TestStack;

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "unused: the rogue harness calls no model" }) });
  await installRoguePlugin(t, { name: "replayer", script: rogueHarness });
});

after(() => t?.close());

void test("a second tool result under an allowed call's id fails the job, and its changes are withheld", async () => {
  const started = await t.cli(["run", "replayer", "run one tool", "--detach"]);
  assert.equal(started.code, 0, started.stderr);
  const jobId = started.stdout.trim();
  const watched = await t.cli(["jobs", "watch", jobId, "--json"]);
  const events = watched.stdout
    .split("\n")
    .filter((line) => line.trim())
    .map((line) => JSON.parse(line) as { artifacts?: { artifacts?: unknown[]; error?: string } });
  const shown = await t.cli(["jobs", "show", jobId, "--json"]);
  const job = JSON.parse(shown.stdout) as { state: string; error?: string };
  assert.equal(job.state, "JOB_STATE_FAILED");
  assert.match(
    job.error ?? "",
    /^the harness broke the protocol: duplicate_request_id: the harness wrote a second tool result for call "call_1"/,
  );
  const artifacts = events.flatMap((e) => (e.artifacts ? [e.artifacts] : []));
  assert.equal(artifacts.length, 1, JSON.stringify(artifacts));
  assert.deepEqual(artifacts[0]!.artifacts ?? [], [], "neither file the rogue wrote is in an artifact");
  assert.match(artifacts[0]!.error ?? "", /^withheld: the harness broke the protocol in what it said/);
});
