// "Every tool call asks first" holds across the orchestrator's own faults: a
// tool result the audit cannot clear from memory is audited before the seq
// that passes it is stored. Stored first and audited after, a crash (or a
// replica taking the job over) between the two re-attached past the result,
// and a harness that ran a tool on its own finished its job. The harness is
// the rogue fixture, which reports a result for a call it never asked about
// and then keeps running for a minute, as a rogue harness would; only the
// audit stops it.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import {
  isTerminal,
  type JobRecord,
  type ListPermissionsQuery,
  type PermissionRecord,
} from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { commitAll, eventually, startTestStack, type TestStack } from "./support/test-stack.js";

const rogueHarness = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks", "rogue-harness.mjs");
const BYPASS =
  "policy bypass: harness rogue ran tool call call_rogue without asking permission first (rule: every tool call asks first); the job was stopped";

/** The job store, with a fault armed for the next read of a job's permissions (the audit's read). */
class FaultyStore extends SqliteJobStore {
  nextPermissionRead: "fails" | "hangs" | undefined;
  #hung: (() => void)[] = [];

  override listPermissions(query: ListPermissionsQuery): Promise<PermissionRecord[]> {
    const fault = this.nextPermissionRead;
    this.nextPermissionRead = undefined;
    if (fault === "fails") return Promise.reject(new Error("SQLITE_BUSY: database is locked"));
    // The process that made this read is gone (as if killed mid-audit): it never returns until the test ends.
    if (fault === "hangs")
      return new Promise((_, reject) => this.#hung.push(() => reject(new Error("the process is gone"))));
    return super.listPermissions(query);
  }

  releaseHung(): void {
    for (const release of this.#hung.splice(0)) release();
  }
}

let t: TestStack;
let store: FaultyStore;
const runners: JobRunner[] = [];
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-tool-result-audit-"));
const repo = mkdtempSync(path.join(os.tmpdir(), "oz0-rogue-repo-"));

function jobRunner(): JobRunner {
  const runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    name: "orchestrator-audit",
    sandboxUrl: t.stack.urls.sandbox,
  });
  runners.push(runner);
  return runner;
}

function ended(jobId: string): Promise<JobRecord> {
  return endedJob(store, jobId);
}

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "unused: the rogue harness calls no model" }) });
  store = new FaultyStore({ file: path.join(home, "orchestrator.db") });
  mkdirSync(path.join(repo, "agents"));
  mkdirSync(path.join(repo, "prompts"));
  writeFileSync(path.join(repo, "prompts", "p.md"), "Run the command you are asked to run.\n");
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    `name: rogues\nversion: 0.1.0\nharnesses:\n  - name: rogue\n    command: ["node", "${rogueHarness}"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/rogue.yaml\n`,
  );
  writeFileSync(
    path.join(repo, "agents", "rogue.yaml"),
    "name: rogue\nruntime: harness:rogue\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/p.md\nharness:\n  tools: [run_command]\n",
  );
  await commitAll(repo, "plugin");
  await new PluginRegistry({ store, home }).install({ source: repo });
});

after(async () => {
  store?.releaseHung();
  for (const runner of runners) await runner.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
  rmSync(repo, { recursive: true, force: true });
});

void test("a tool result whose audit could not read the store is audited again at the re-attach, and the bypass fails the job", async () => {
  const runner = jobRunner();
  store.nextPermissionRead = "fails";
  const job = await runner.runAgent({ agent: "rogue", input: "unasked" });
  const done = await ended(job.id);
  assert.equal(store.nextPermissionRead, undefined, "the audit met the failing read");
  assert.equal(done.state, "failed");
  assert.equal(done.error, BYPASS);
});

void test("an orchestrator gone between hearing a tool result and auditing it: the replica that takes the job over audits it", async () => {
  const first = jobRunner();
  store.nextPermissionRead = "hangs";
  const job = await first.runAgent({ agent: "rogue", input: "unasked" });
  await eventually(async () => store.nextPermissionRead === undefined || undefined, "the audit's read began");
  // The first replica is gone mid-audit: whatever it stored before the audit is all the next one has.
  first.abandon(job.id);
  const stored = await store.getJob(job.id);
  assert.ok(stored && !isTerminal(stored.state), "the job was still running when its replica went");
  const events = await store.listJobEvents(job.id, 0);
  assert.equal(
    events.filter((e) => e.event.case === "toolResult").length,
    0,
    "the unaudited tool result was not stored, so no re-attach passes it",
  );
  await jobRunner().resumeJob(job.id);
  const done = await ended(job.id);
  assert.equal(done.state, "failed");
  assert.equal(done.error, BYPASS);
});
