// A permission request's id, and its tool call's id, are used once in a
// session: a harness that repeats one breaks the protocol, and the job fails
// with duplicate_request_id before the repeat touches anything. Before, a
// repeated id replaced the stored row of a call already decided, and a
// repeated call id gave the tool-call audit two rows to choose from, one
// approved and one denied. The harness (test/fixtures/repeated-ids) writes
// its JSON lines itself. Each case runs behind a sandbox node that is the
// attacker's (support/hostile-sandbox.ts: it passes every line on, checking
// nothing), so what is checked is the orchestrator's own rule; a repeat
// after an orchestrator restart is caught from the stored rows; and the
// same harness behind the real sandbox fails its job the same way. A result
// with no call id is matched to no request, so an approved request without
// one does not cover it. The rule a session broke (a repeat, a policy
// bypass) is stored with the job at once: behind a node that lets the
// session run on, the job still fails after an orchestrator restart, and the
// orchestrator that follows it then decides nothing more of it and starts no
// operation for it. A rule broken while an operation runs stops the operation
// with the session.
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { MAX_ARTIFACT_FILES } from "../src/jobs/job-artifacts.js";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import type { JobRecord, PermissionRecord } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { HostileSandbox } from "./support/hostile-sandbox.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { eventually, packageDir, startTestStack, type TestStack } from "./support/test-stack.js";

const plugin = path.join(packageDir, "test/fixtures/repeated-ids");
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-repeated-ids-"));

let t: TestStack;
let hostile: HostileSandbox;
let hostileUrl: string;
let store: SqliteJobStore;
const runners = new Set<JobRunner>();

function jobRunner(sandboxUrl: string): JobRunner {
  const runner = inProcessJobRunner({ stack: t, store, home, sandboxUrl, name: "orchestrator-repeated-ids" });
  runners.add(runner);
  return runner;
}

async function closeRunner(runner: JobRunner): Promise<void> {
  runners.delete(runner);
  await runner.close();
}

before(async () => {
  // The model is never called: the harness writes its events itself.
  t = await startTestStack({ pick: () => ({ text: "unused" }) });
  hostile = new HostileSandbox();
  hostileUrl = await hostile.listen();
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  await new PluginRegistry({ store, home }).install({ source: plugin });
});

after(async () => {
  for (const runner of runners) await runner.close();
  await hostile?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

function ended(jobId: string): Promise<JobRecord> {
  return endedJob(store, jobId);
}

const fix =
  "the request was refused, every earlier decision stands, and the session was stopped. A harness gives every permission request an id, and every tool call a call_id, used once in its session";
const repeatedId = `the harness broke the protocol: duplicate_request_id: permission request "perm-1" reuses "perm-1" as its id, the id of permission request "perm-1" earlier in this session; ${fix}`;
const repeatedCall = `the harness broke the protocol: duplicate_request_id: permission request "perm-2" reuses "call-1" as its call id, the call id of permission request "perm-1" earlier in this session; ${fix}`;

/** perm-1 as the policy decided it: read_file for call-1, allowed. */
function assertFirstDecisionStands(rows: PermissionRecord[]): void {
  assert.deepEqual(
    rows.map((p) => ({ id: p.id, callId: p.callId, tool: p.tool, status: p.status, decider: p.decider })),
    [{ id: "perm-1", callId: "call-1", tool: "read_file", status: "approved", decider: "policy" }],
    "the stored rows are perm-1's decision alone: the repeat was neither stored nor decided",
  );
}

/** A job of the repeater on its own runner (closed after, whatever the test does), to its end. */
async function runToEnd(sandboxUrl: string, input: string): Promise<JobRecord> {
  const runner = jobRunner(sandboxUrl);
  try {
    const job = await runner.runAgent({ agent: "repeater", input });
    return await ended(job.id);
  } finally {
    await closeRunner(runner);
  }
}

void test("behind a node that checks nothing, the control keeps to the protocol and succeeds", async () => {
  const done = await runToEnd(hostileUrl, "polite");
  assert.equal(done.state, "succeeded", done.error);
  assertFirstDecisionStands(await store.listPermissions({ jobId: done.id }));
});

void test("a decided permission id asked again (for a call that waits for a person) fails the job, and the decided row is unchanged", async () => {
  const done = await runToEnd(hostileUrl, "repeat-id");
  assert.equal(done.state, "failed");
  assert.equal(done.error, repeatedId);
  assertFirstDecisionStands(await store.listPermissions({ jobId: done.id }));
});

void test("a second request under an approved call's id, for a denied tool, fails the job: the approved row does not pass the call", async () => {
  const done = await runToEnd(hostileUrl, "repeat-call");
  assert.equal(done.state, "failed", "the call ran with a denied tool: the job must not succeed");
  assert.equal(done.error, repeatedCall);
  assert.equal(done.resultText, "", "the harness's result is not the job's");
  assertFirstDecisionStands(await store.listPermissions({ jobId: done.id }));
});

void test("a permission request with no id fails the job before anything is stored", async () => {
  const done = await runToEnd(hostileUrl, "empty-id");
  assert.equal(done.state, "failed");
  assert.equal(done.error, `the harness broke the protocol: invalid_event: a permission request has no id; ${fix}`);
  assert.deepEqual(await store.listPermissions({ jobId: done.id }), []);
});

void test("a permission request or runtime tool call whose id has a NUL in it, or is too long, fails the job before anything is stored", async () => {
  const nul = await runToEnd(hostileUrl, "nul-id");
  assert.equal(nul.state, "failed", "the call ran without a person's answer: the job must not succeed");
  assert.equal(
    nul.error,
    `the harness broke the protocol: invalid_event: permission request "x\\u0000": its id has a control character (U+0000) in it; ${fix}, at most 256 characters, with no control characters, line or paragraph separators, bidirectional controls or half characters`,
  );
  assert.deepEqual(await store.listPermissions({ jobId: nul.id }), []);

  const long = await runToEnd(hostileUrl, "long-id");
  assert.equal(long.state, "failed");
  assert.match(
    long.error,
    /^the harness broke the protocol: invalid_event: permission request "p+.*": its id has 300 characters, more than 256;/,
  );
  assert.deepEqual(await store.listPermissions({ jobId: long.id }), []);

  const runtime = await runToEnd(hostileUrl, "nul-runtime-id");
  assert.equal(runtime.state, "failed");
  assert.equal(
    runtime.error,
    'the harness broke the protocol: invalid_event: runtime tool call "r\\u0000": its id has a control character (U+0000) in it; ids are at most 256 characters, with no control characters, line or paragraph separators, bidirectional controls or half characters',
  );
});

void test("a tool call whose input holds a number JSON cannot write fails the job, saying so", async () => {
  // Stored as JSON, it could never be: before, the re-attach delivered it again and again.
  const done = await runToEnd(hostileUrl, "infinite-number");
  assert.equal(done.state, "failed");
  assert.match(
    done.error,
    /^the session's messages? [\d-]+ could not be stored \(event \d+ \(toolCall\) cannot be written as JSON: .*\), 3 times/,
  );
});

void test("artifacts a node names '..', with a NUL or at 600 bytes are stored under names a file may have, and the job goes on", async () => {
  // Before, the write of each failed (EISDIR, a NUL in a path) every time it was delivered.
  const done = await runToEnd(hostileUrl, "odd-artifacts");
  assert.equal(done.state, "succeeded", done.error);
  const events = await store.listJobEvents(done.id, 0);
  assert.ok(events.some((e) => e.event.case === "text" && e.event.value.text === "handing back two files"));
  const stored = events.flatMap((e) => (e.event.case === "artifacts" ? e.event.value.artifacts : []));
  assert.deepEqual(
    stored.map((a) => [a.name, readFileSync(a.path, "utf8")]),
    [
      ["artifact", "up"],
      ["a\uFFFDb", "nul"],
      ["é".repeat(100), "long"],
    ],
  );
  for (const a of stored) assert.equal(path.dirname(a.path), path.join(home, "jobs", done.id, "artifacts"));
});

void test("of a node's artifacts message of 1,200 files, the first 1,000 are kept, and the job says the rest were not", async () => {
  // Before, every one was written (12,000 of one name held the replica's event loop for seconds; attacker review).
  const done = await runToEnd(hostileUrl, "many-artifacts");
  assert.equal(done.state, "succeeded", done.error);
  const events = await store.listJobEvents(done.id, 0);
  const artifacts = events.flatMap((e) => (e.event.case === "artifacts" ? [e.event.value] : []));
  assert.equal(artifacts.length, 1);
  assert.equal(artifacts[0]!.artifacts.length, MAX_ARTIFACT_FILES);
  assert.equal(artifacts[0]!.error, `the node sent 1200 files; the first ${MAX_ARTIFACT_FILES} are kept`);
  assert.equal(readdirSync(path.join(home, "jobs", done.id, "artifacts")).length, MAX_ARTIFACT_FILES);
  assert.deepEqual(
    artifacts[0]!.artifacts.slice(0, 3).map((a) => a.name),
    ["same.txt", "same (2).txt", "same (3).txt"],
  );
});

void test("a result with no call id is not covered by an approved request with none: the audit stops the job", async () => {
  const done = await runToEnd(hostileUrl, "no-call-id");
  assert.equal(done.state, "failed", "a result that names no call passed as the approved request's");
  assert.equal(
    done.error,
    "policy bypass: harness repeater ran a tool call whose result names no call id without asking permission first (rule: every tool call asks first); the job was stopped",
  );
});

void test("a permission id decided before an orchestrator restart is a repeat after it (the stored rows count)", async () => {
  const first = jobRunner(hostileUrl);
  const job = await first.runAgent({ agent: "repeater", input: "wait-repeat-id" });
  const decided = await eventually(async () => {
    const [p] = await store.listPermissions({ jobId: job.id });
    return p?.status === "approved" ? p : undefined;
  });
  await closeRunner(first);
  const second = jobRunner(hostileUrl);
  try {
    await second.resumeAll();
    // The harness goes on to repeat perm-1 once the new orchestrator follows the session.
    hostile.write(job.sessionId, "{}");
    const done = await ended(job.id);
    assert.equal(done.state, "failed");
    assert.equal(done.error, repeatedId);
    const rows = await store.listPermissions({ jobId: job.id });
    assertFirstDecisionStands(rows);
    assert.deepEqual(rows[0], { ...decided, delivered: rows[0]!.delivered });
  } finally {
    await closeRunner(second);
  }
});

const unasked =
  "policy bypass: harness repeater ran tool call call-9 without asking permission first (rule: every tool call asks first); the job was stopped";

for (const [mode, error] of [
  ["repeat-id-then-wait", repeatedId],
  ["unasked-then-wait", unasked],
] as const) {
  void test(`the rule a session broke outlives an orchestrator restart, behind a node that lets it run on (${mode})`, async () => {
    const stubborn = new HostileSandbox({ ignoreCancel: true });
    try {
      const url = await stubborn.listen();
      const first = jobRunner(url);
      const job = await first.runAgent({ agent: "repeater", input: mode });
      // The session was asked to stop; the new orchestrator re-attaches past what broke the rule.
      assert.equal(await eventually(async () => stubborn.cancelRequested(job.sessionId)), error);
      await closeRunner(first);
      const second = jobRunner(url);
      await second.resumeAll();
      // The harness ends with a completed result, as if nothing had happened.
      stubborn.write(job.sessionId, "{}");
      const done = await ended(job.id);
      await closeRunner(second);
      assert.equal(done.state, "failed", "the session broke a rule: its result is not the job's");
      assert.equal(done.error, error);
      // What it asked after the restart (read_file, which the policy allows; an operation) got nothing.
      assertFirstDecisionStands(await store.listPermissions({ jobId: job.id }));
      assert.deepEqual(await store.listOperationCheckpoints(job.id), [], "no operation started for it");
      const texts = (await store.listJobEvents(job.id, 0)).flatMap((e) =>
        e.event.case === "text" ? [e.event.value.text] : [],
      );
      assert.deepEqual(texts, [
        "rt-3 answered: job_ending: summarize was not run: the job is ending (cancelled, or failed), and its session is being stopped",
      ]);
    } finally {
      await stubborn.close();
    }
  });
}

void test("a rule broken while a harness operation runs stops the operation's scratch session at once, not when the job ends", async () => {
  // Before, the operation ran on until the job ended: behind a node that lets the session run on, 30 s later.
  const stubborn = new HostileSandbox({ ignoreCancel: true });
  const runner = jobRunner(await stubborn.listen());
  try {
    const job = await runner.runAgent({ agent: "repeater", input: "operation-then-unasked" });
    const scratch = await eventually(
      async () => (await store.getOperationCheckpoint(job.id, "rt-1"))?.scratchSessionIds[0],
      "the operation's scratch session",
    );
    await eventually(async () => stubborn.sessionRequest(scratch), "the scratch session on the node");
    // The parent goes on: it runs a command without asking.
    stubborn.write(job.sessionId, "{}");
    const first = await eventually(async () => {
      const now = await store.getJob(job.id);
      if (now && !["pending", "running"].includes(now.state)) return `the job ended (${now.state}: ${now.error})`;
      return stubborn.cancelRequested(scratch) ? "the operation was stopped" : undefined;
    });
    assert.equal(first, "the operation was stopped");
    assert.equal(stubborn.cancelRequested(job.sessionId), unasked, "the parent was asked to stop for the bypass");
  } finally {
    // The node first: its sessions end, so the runner does not wait out the stop of the one it ignored.
    await stubborn.close();
    await closeRunner(runner);
  }
});

void test("a harness that broke a rule, then wrote a completed result, behind a node that lets it run on: the job fails without that result", async () => {
  const stubborn = new HostileSandbox({ ignoreCancel: true });
  // Asked to stop, the node is given half a second before the job ends without it.
  const runner = inProcessJobRunner({
    stack: t,
    store,
    home,
    sandboxUrl: await stubborn.listen(),
    name: "orchestrator-repeated-ids-quick-stop",
    stopWaitMs: 500,
  });
  try {
    const job = await runner.runAgent({ agent: "repeater", input: "unasked-result-then-wait" });
    const done = await ended(job.id);
    assert.equal(done.state, "failed");
    assert.match(done.error, /^policy bypass: .* call-9 .*; its sandbox node did not end the session within/);
    assert.equal(done.resultText, "", "the harness's result is not the job's");
  } finally {
    await stubborn.close();
    await runner.close();
  }
});

void test("a broken rule whose write the database refused once is written when the request comes again, and the session is stopped", async () => {
  // Before, the request delivered again found the rule broken in memory and only passed it: the rule was never
  // stored, and a node that lets the session run on was never asked to stop it.
  class RefusingOnce extends SqliteJobStore {
    refused = 0;
    override updateJob(id: string, patch: Parameters<SqliteJobStore["updateJob"]>[1]): Promise<JobRecord> {
      if (patch.error && this.refused === 0) {
        this.refused++;
        return Promise.reject(Object.assign(new Error("database is locked"), { code: "SQLITE_BUSY" }));
      }
      return super.updateJob(id, patch);
    }
  }
  const refusing = new RefusingOnce({ file: path.join(home, "orchestrator.db") });
  const stubborn = new HostileSandbox({ ignoreCancel: true });
  const runner = inProcessJobRunner({
    stack: t,
    store: refusing,
    home,
    sandboxUrl: await stubborn.listen(),
    name: "orchestrator-repeated-ids-refused",
  });
  try {
    const job = await runner.runAgent({ agent: "repeater", input: "repeat-id-then-wait" });
    assert.equal(
      await eventually(async () => stubborn.cancelRequested(job.sessionId), "the node asked to stop"),
      repeatedId,
    );
    assert.equal(refusing.refused, 1);
    assert.equal((await store.getJob(job.id))?.error, repeatedId, "the rule broken is stored");
  } finally {
    await stubborn.close();
    await runner.close();
    await refusing.close();
  }
});

void test("behind the real sandbox, a repeated call id fails the job the same way", async () => {
  const done = await runToEnd(t.stack.urls.sandbox, "repeat-call");
  assert.equal(done.state, "failed");
  assert.match(done.error ?? "", /^the harness broke the protocol: duplicate_request_id: .*"call-1"/);
  assertFirstDecisionStands(await store.listPermissions({ jobId: done.id }));
  const control = await runToEnd(t.stack.urls.sandbox, "polite");
  assert.equal(control.state, "succeeded", control.error);
});
