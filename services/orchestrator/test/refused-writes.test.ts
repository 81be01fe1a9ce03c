// What becomes of a session's message whose write the database refuses.
//
// Busy or away, the database is waited for: the message is stored in one
// step with the seq that passes it, a failed step stores neither, and the
// re-attach that follows delivers the message again. A permission request
// whose decision could not be stored is decided then. (Before, the seq in
// memory had already passed it: the re-attach started after the request,
// which was never decided, and the session waited for an answer nobody
// would give.)
//
// Refused for its data (a value a column cannot hold, a constraint it
// breaks), a message is refused again however often it comes: it was
// delivered and refused for ever, and the job neither went on nor ended.
// Refused three times in a row, it now fails its job, saying which message
// and why.
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
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

const busy = (): Error => Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" });
/** How PostgreSQL refuses a NUL in text, with its SQLSTATE (class 22, data exception). */
const refusedData = (): Error =>
  Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: "22021" });

/** The job store, refusing the writes `refuse.which` picks out, `refuse.times` times, with `refuse.error`. */
class RefusingStore extends SqliteJobStore {
  refuse: { which: (change: JobAppend) => boolean; times: number; error: () => Error } | undefined;
  refused = 0;

  /** From now on, refuses the next `times` writes `which` picks out; counts from 0 again. */
  refuseNext(which: (change: JobAppend) => boolean, times: number, error: () => Error): void {
    this.refuse = { which, times, error };
    this.refused = 0;
  }

  override append(change: JobAppend): Promise<JobEvent[]> {
    if (this.refuse && this.refuse.times > 0 && this.refuse.which(change)) {
      this.refuse.times--;
      this.refused++;
      return Promise.reject(this.refuse.error());
    }
    return super.append(change);
  }
}

const decision = (change: JobAppend): boolean => (change.permissions?.length ?? 0) > 0;
const poisonText = (change: JobAppend): boolean =>
  change.events.some((e) => e.event.case === "text" && e.event.value.text.includes("poison"));

let t: TestStack;
let store: RefusingStore;
let runner: JobRunner;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-refused-writes-"));

before(async () => {
  t = await startTestStack({
    pick: ({ input, turn }) => {
      if (input.includes("poison")) return { text: "a poison text" };
      return turn === 0
        ? { toolCalls: [{ name: "run_command", input: { command: "echo decided" } }] }
        : { text: "went on" };
    },
  });
  store = new RefusingStore({ file: path.join(home, "orchestrator.db") });
  runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    sandboxUrl: t.stack.urls.sandbox,
    name: "orchestrator-refused",
  });
  const repo = await makePluginRepo({
    agents: {
      plain: fakeAgentYaml({ name: "plain", tools: ["run_command"] }),
      careful: fakeAgentYaml({ name: "careful", tools: ["run_command"], requiresApproval: ["run_command"] }),
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
  store.refuseNext(decision, 1, busy);
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
  store.refuseNext(decision, 1, busy);
  const job = await runner.runAgent({ agent: "careful", input: "run it" });
  const waiting = await eventually(async () => (await store.listPermissions({ jobId: job.id, pendingOnly: true }))[0]);
  assert.equal(store.refused, 1, "the wait's first write was refused");
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

void test("a database busy four times in a row is waited for, and the job goes on", async () => {
  store.refuseNext(decision, 4, busy);
  const job = await runner.runAgent({ agent: "plain", input: "run it" });
  const done = await endedJob(store, job.id);
  assert.equal(store.refused, 4);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
});

void test("a permission request whose decision the database refuses for its data fails its job, saying so", async () => {
  store.refuseNext(decision, Infinity, refusedData);
  const job = await runner.runAgent({ agent: "plain", input: "run it" });
  const done = await endedJob(store, job.id);
  assert.equal(store.refused, 3, "refused three times, then not asked again");
  assert.equal(done.state, "failed");
  assert.match(
    done.error,
    /^the session's message \d+ could not be stored \(invalid byte sequence for encoding "UTF8": 0x00\), 3 times: its data cannot be stored/,
  );
  assert.deepEqual(await store.listPermissions({ jobId: job.id }), [], "nothing decided: the call never ran");
});

void test("a run of events the database refuses for its data fails its job, saying so", async () => {
  store.refuseNext(poisonText, Infinity, refusedData);
  const job = await runner.runAgent({ agent: "plain", input: "say the poison" });
  const done = await endedJob(store, job.id);
  assert.equal(store.refused, 3);
  assert.equal(done.state, "failed");
  assert.match(done.error, /^the session's messages? [\d-]+ could not be stored \(.*\), 3 times/);
  assert.equal(done.resultText, "", "the result of a session whose messages were lost is not the job's");
});
