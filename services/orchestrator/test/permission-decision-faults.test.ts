// A permission request whose decision could not be stored (the database
// busy, a replica's connection dropped) is decided again at the re-attach
// that follows. The decision is stored in one step with the seq that passes
// the request; a failed step stores neither, so the request must be read
// again. Before, the seq in memory had already passed it: the re-attach
// started after the request, which was never decided, and the session
// waited for an answer nobody would give.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobAppend } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { eventually, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

/** The job store, refusing the next write that stores a permission decision. */
class FaultyStore extends SqliteJobStore {
  failNextDecision = false;
  refused = 0;

  override append(change: JobAppend): Promise<JobEvent[]> {
    if (this.failNextDecision && change.permissions?.length) {
      this.failNextDecision = false;
      this.refused++;
      return Promise.reject(new Error("SQLITE_BUSY: database is locked"));
    }
    return super.append(change);
  }
}

let t: TestStack;
let store: FaultyStore;
let runner: JobRunner;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-decision-faults-"));

before(async () => {
  t = await startTestStack({
    pick: ({ turn }) =>
      turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo decided" } }] } : { text: "went on" },
  });
  store = new FaultyStore({ file: path.join(home, "orchestrator.db") });
  runner = inProcessJobRunner({ stack: t, store, home, sandboxUrl: t.stack.urls.sandbox, name: "orchestrator-faults" });
  const repo = await makePluginRepo({
    agents: {
      plain:
        "name: plain\nruntime: harness:fake\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/fixer.md\nharness:\n  tools: [run_command]\n",
      careful:
        "name: careful\nruntime: harness:fake\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/fixer.md\nharness:\n  tools: [run_command]\n  requires_approval: [run_command]\n",
    },
  });
  await new PluginRegistry({ store, home }).install({ source: repo });
});

after(async () => {
  await runner?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

void test("a permission request whose decision could not be stored is decided at the re-attach, and its job goes on", async () => {
  store.failNextDecision = true;
  const job = await runner.runAgent({ agent: "plain", input: "run it" });
  const done = await endedJob(store, job.id);
  assert.equal(store.refused, 1, "the decision's first write was refused");
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
  const [decided, ...more] = await store.listPermissions({ jobId: job.id });
  assert.deepEqual(more, [], "decided once");
  assert.equal(decided?.status, "approved");
  assert.equal(decided.delivered, true);
});

void test("a request for a person whose wait could not be stored waits at the re-attach, and the answer goes through", async () => {
  store.failNextDecision = true;
  const job = await runner.runAgent({ agent: "careful", input: "run it" });
  const waiting = await eventually(async () => (await store.listPermissions({ jobId: job.id, pendingOnly: true }))[0]);
  assert.equal(store.refused, 2, "the wait's first write was refused");
  await runner.answerPermission({
    jobId: job.id,
    callId: waiting.callId,
    allow: true,
    answeredBy: { id: "faults-test", groups: [] },
  });
  const done = await endedJob(store, job.id);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
});
