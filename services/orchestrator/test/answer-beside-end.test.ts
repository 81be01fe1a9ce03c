// A person's answer taken at another replica lands just before the job's own
// write that closes its waiting calls: the job's end (its session ended with
// a call still waiting) or its cancel. On PostgreSQL that write is refused
// whole (DecidedMeanwhileError: the call was decided meanwhile), since the
// first decision stands. Before, the refusal ended the work: a job whose
// session had ended stayed running, its lease renewed, until the
// orchestrator restarted; a cancel failed with the refusal. Now each reads
// the calls still waiting again, and ends or cancels the job.
//
// The store here stands for the race: it stores the other replica's answer,
// then refuses the write that closes the call, as PostgreSQL does.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { DecidedMeanwhileError, type JobAppend } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import {
  commitAll,
  eventually,
  fakeAgentYaml,
  makePluginRepo,
  startTestStack,
  type TestStack,
} from "./support/test-stack.js";

const diesWaiting = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks", "asks-then-dies.mjs");

/** The runtime's closing of a waiting call, as `reason` says (the job ended, or was cancelled). */
const closing = (reason: string) => (change: JobAppend) =>
  (change.permissions ?? []).some((p) => p.status === "cancelled" && p.reason === reason);

/** Answers a call at "another replica" just before the write `which` picks out, which it then refuses, once. */
class AnsweredMeanwhileStore extends SqliteJobStore {
  race: ((change: JobAppend) => boolean) | undefined;
  raced = 0;

  /** From now on, the next write `which` picks out meets an answer given elsewhere; counts from 0 again. */
  raceNext(which: (change: JobAppend) => boolean): void {
    this.race = which;
    this.raced = 0;
  }

  override async append(change: JobAppend): Promise<JobEvent[]> {
    if (!this.race?.(change)) return super.append(change);
    this.race = undefined;
    this.raced++;
    const closed = change.permissions!.find((p) => p.status === "cancelled")!;
    const theirs = { ...closed, status: "approved" as const, decider: "person" as const, answeredBy: "bob" };
    await super.append({ jobId: change.jobId, events: [], permissions: [{ ...theirs, reason: "approved" }] });
    throw new DecidedMeanwhileError(closed, { status: "approved", answeredBy: "bob" });
  }
}

let t: TestStack;
let store: AnsweredMeanwhileStore;
let runner: JobRunner;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-answer-beside-end-"));

before(async () => {
  t = await startTestStack({
    pick: ({ turn }) =>
      turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo waited" } }] } : { text: "went on" },
  });
  store = new AnsweredMeanwhileStore({ file: path.join(home, "orchestrator.db") });
  runner = inProcessJobRunner({ stack: t, store, home, sandboxUrl: t.stack.urls.sandbox, name: "beside-end" });
  const registry = new PluginRegistry({ store, home });
  const repo = await makePluginRepo({
    agents: { careful: fakeAgentYaml({ name: "careful", tools: ["run_command"], requiresApproval: ["run_command"] }) },
  });
  await registry.install({ source: repo });
  // Its harness dies with its call waiting: the session ends, and the job with it.
  const dying = path.join(home, "dying-plugin");
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(dying, sub), { recursive: true });
  writeFileSync(path.join(dying, "prompts", "fixer.md"), "Do as you are told.\n");
  writeFileSync(
    path.join(dying, "oz0-plugin.yaml"),
    `name: dying\nversion: 0.1.0\nharnesses:\n  - name: dies\n    command: ["node", "${diesWaiting}"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/brief.yaml\n`,
  );
  writeFileSync(
    path.join(dying, "agents", "brief.yaml"),
    fakeAgentYaml({ name: "brief", tools: ["run_command"], requiresApproval: ["run_command"] }).replace(
      "harness:fake",
      "harness:dies",
    ),
  );
  await commitAll(dying, "plugin");
  await registry.install({ source: dying });
});

after(async () => {
  await runner?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

const waitingCall = (jobId: string) =>
  eventually(async () => (await store.listPermissions({ jobId, pendingOnly: true }))[0], `a call of ${jobId} waiting`);

void test("a job whose session ended with a call waiting ends, though that call was answered elsewhere meanwhile", async () => {
  store.raceNext(closing("the job ended"));
  const job = await runner.runAgent({ agent: "brief", input: "wait" });
  const done = await endedJob(store, job.id);
  assert.equal(store.raced, 1, "the job's end met the answer");
  assert.equal(done.state, "failed", done.error);
  const [call] = await store.listPermissions({ jobId: job.id });
  assert.equal(call?.status, "approved", "the answer that came first stands");
  assert.equal(call.answeredBy, "bob");
});

void test("a cancel that meets an answer given elsewhere meanwhile still cancels the job", async () => {
  const job = await runner.runAgent({ agent: "careful", input: "wait" });
  await waitingCall(job.id);
  store.raceNext(closing("the job was cancelled"));
  const cancelled = await runner.cancel({ jobId: job.id, reason: "changed plans" });
  assert.equal(store.raced, 1, "the cancel met the answer");
  assert.ok(cancelled.cancelRequestedAt, "the cancel is stored");
  assert.equal((await endedJob(store, job.id)).state, "cancelled");
});
