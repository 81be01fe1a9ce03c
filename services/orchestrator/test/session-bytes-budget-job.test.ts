// A job behind a sandbox node that is the attacker's (support/hostile-sandbox.ts:
// it passes every line its harness writes on as an event, checking nothing)
// whose session sends more than OZ0_MAX_SESSION_BYTES: the job fails saying
// so, with what the node sent and the setting to raise, its session is
// cancelled at the node, and its stored transcript stops at the budget.
// Before, each message was bounded, but a node could send events without
// end and the orchestrator stored them all. A session under the budget runs
// as before. The harness (test/fixtures/flood) writes its texts itself.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import type { JobRecord } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { HostileSandbox } from "./support/hostile-sandbox.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { eventually, packageDir, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(packageDir, "test/fixtures/flood");
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-session-bytes-"));
/** The budget the runner is given: room for about 64 of the texts below, and far less than the 200 sent. */
const BUDGET = 64 * 1024;
const TEXT = 1000;

let t: TestStack;
let hostile: HostileSandbox;
let store: SqliteJobStore;
let runner: JobRunner;

before(async () => {
  // The model is never called: the harness writes its events itself.
  t = await startTestStack({ pick: () => ({ text: "unused" }) });
  hostile = new HostileSandbox();
  const sandboxUrl = await hostile.listen();
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  await new PluginRegistry({ store, home }).install({ source: plugin });
  runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    sandboxUrl,
    name: "orchestrator-session-bytes",
    maxSessionBytes: BUDGET,
  });
});

after(async () => {
  await runner?.close();
  await hostile?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

/** The texts stored with the job, in order. */
async function storedTexts(job: JobRecord): Promise<string[]> {
  const events = await store.listJobEvents(job.id, 0, 10_000);
  return events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : []));
}

void test("a session that sends more than OZ0_MAX_SESSION_BYTES fails its job, is cancelled at its node, and is stored only to the budget", async () => {
  // 200 texts of 1000 characters: about 200 KB, three times the budget. The harness then waits to be stopped.
  const job = await runner.runAgent({ agent: "flooder", input: `200 ${TEXT} wait` });
  const done = await endedJob(store, job.id);
  assert.equal(done.state, "failed");
  const sent =
    /^session_too_large: the sandbox node at http:\/\/127\.0\.0\.1:\d+ sent (\d+) bytes about session (\S+), more than the 65536 a session may send \(OZ0_MAX_SESSION_BYTES\); the node was asked to cancel the session, and nothing past the budget was stored\. A session that needs more \(a very long transcript, large artifacts\) runs with a larger OZ0_MAX_SESSION_BYTES$/.exec(
      done.error,
    );
  assert.ok(sent, done.error);
  assert.equal(sent[2], job.sessionId);
  // What passed the budget is the message that did: the budget and one text at most.
  assert.ok(Number(sent[1]) > BUDGET && Number(sent[1]) < BUDGET + TEXT + 100, `sent ${sent[1]} bytes`);
  const texts = await storedTexts(done);
  assert.ok(texts.length > 0, "what came within the budget is stored");
  assert.ok(texts.length < 200, `${texts.length} of the 200 texts stored`);
  assert.ok(
    texts.reduce((sum, text) => sum + text.length, 0) <= BUDGET,
    "the stored texts hold no more than the budget",
  );
  assert.match(
    (await eventually(() => Promise.resolve(hostile.cancelRequested(job.sessionId)), "the node was asked to cancel")) ??
      "",
    /more than 65536 bytes/,
  );
});

void test("a session that sends less than the budget runs to its end as before", async () => {
  const job = await runner.runAgent({ agent: "flooder", input: `20 ${TEXT} result` });
  const done = await endedJob(store, job.id);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "flooded");
  assert.equal((await storedTexts(done)).length, 20);
});
