// The orchestrator's stream to the sandbox breaks while the session lives on
// (the stream goes through a TCP relay these tests cut, as a sandbox that
// restarts and takes its sessions over would look):
// - a person answers meanwhile: writing the answer fails, and the re-attach
//   that follows must write it, or the session waits for an answer given;
// - the stream stays broken longer than the re-attach attempts take (a
//   sandbox restarting on a loaded machine): the job is still followed once
//   it mends, and fails only after the re-attach window.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { JobRunner } from "../src/jobs/job-runner.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { endedJob, inProcessJobRunner } from "./support/in-process-runner.js";
import { TcpRelay } from "./support/tcp-relay.js";
import { eventually, fakeAgentYaml, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let relay: TcpRelay;
let store: SqliteJobStore;
let runner: JobRunner;
let repo: string;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-reattach-delivery-"));

function jobRunner(options: { store: SqliteJobStore; sandboxUrl: string; reattachWindowMs?: number }): JobRunner {
  return inProcessJobRunner({ ...options, stack: t, home, name: "orchestrator-reattach" });
}

before(async () => {
  t = await startTestStack({
    pick: ({ turn }) =>
      turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo answered" } }] } : { text: "went on" },
  });
  const target = new URL(t.stack.urls.sandbox);
  relay = new TcpRelay({ host: target.hostname, port: Number(target.port) });
  const sandboxUrl = `http://127.0.0.1:${await relay.listen()}`;
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  runner = jobRunner({ store, sandboxUrl });
  repo = await makePluginRepo({
    agents: {
      careful: fakeAgentYaml({ name: "careful", tools: ["run_command"], requiresApproval: ["run_command"] }),
    },
  });
  await new PluginRegistry({ store, home }).install({ source: repo });
});

after(async () => {
  await runner?.close();
  await relay?.close();
  await store?.close();
  await t?.close();
  rmSync(home, { recursive: true, force: true });
});

void test("an answer given while the sandbox stream is broken reaches the session at the re-attach", async () => {
  const job = await runner.runAgent({ agent: "careful", input: "run it" });
  const waiting = await eventually(async () => (await store.listPermissions({ jobId: job.id, pendingOnly: true }))[0]);
  relay.cut();
  await runner.answerPermission({
    jobId: job.id,
    callId: waiting.callId,
    allow: true,
    answeredBy: { id: "reattach-test", groups: [] },
  });
  relay.resume();
  const done = await endedJob(store, job.id);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
  assert.equal((await store.getPermission(job.id, waiting.id))?.delivered, true);
});

void test("a stream broken longer than the re-attach attempts take is followed again once it mends", async () => {
  const job = await runner.runAgent({ agent: "careful", input: "run it" });
  const waiting = await eventually(async () => (await store.listPermissions({ jobId: job.id, pendingOnly: true }))[0]);
  relay.cut();
  // Five attempts, 0.2 to 1.6 s apart, are over in about 3 s; the default window is 30 s.
  await new Promise((resolve) => setTimeout(resolve, 6_000));
  assert.equal((await store.getJob(job.id))?.state, "waiting", "the job is still followed while the stream is broken");
  relay.resume();
  await runner.answerPermission({
    jobId: job.id,
    callId: waiting.callId,
    allow: true,
    answeredBy: { id: "reattach-test", groups: [] },
  });
  const done = await endedJob(store, job.id);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
});

void test("a stream that stays broken past the re-attach window fails its job, saying so", async () => {
  const relayed = new TcpRelay({ host: "127.0.0.1", port: Number(new URL(t.stack.urls.sandbox).port) });
  const jobs = new SqliteJobStore({ file: path.join(home, "window.db") });
  const short = jobRunner({
    store: jobs,
    sandboxUrl: `http://127.0.0.1:${await relayed.listen()}`,
    reattachWindowMs: 1_000,
  });
  try {
    await new PluginRegistry({ store: jobs, home }).install({ source: repo });
    const job = await short.runAgent({ agent: "careful", input: "run it" });
    await eventually(async () => (await jobs.listPermissions({ jobId: job.id, pendingOnly: true }))[0]);
    relayed.cut();
    const done = await endedJob(jobs, job.id);
    assert.equal(done.state, "failed");
    assert.match(done.error ?? "", /lost the session's stream and could not re-attach/);
  } finally {
    await short.close();
    await relayed.close();
    await jobs.close();
  }
});
