// A person answers while the orchestrator's stream to the sandbox is broken:
// writing the answer fails, and the re-attach that follows must write it, or
// the session waits for an answer already given. The stream goes through a
// TCP relay this test cuts, so the sandbox and its session live on.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createLogger } from "@oz0/serving";
import { HookStage } from "../src/policy/hook-stage.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { isTerminal } from "../src/store/job-store.js";
import { LlmProxyClient } from "../src/sessions/llm-proxy-client.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { TcpRelay } from "./support/tcp-relay.js";
import { eventually, makePluginRepo, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let relay: TcpRelay;
let store: SqliteJobStore;
let runner: JobRunner;
const home = mkdtempSync(path.join(os.tmpdir(), "oz0-reattach-delivery-"));

before(async () => {
  t = await startTestStack({
    pick: ({ turn }) =>
      turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo answered" } }] } : { text: "went on" },
  });
  const target = new URL(t.stack.urls.sandbox);
  relay = new TcpRelay({ host: target.hostname, port: Number(target.port) });
  const sandboxUrl = `http://127.0.0.1:${await relay.listen()}`;
  store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  runner = new JobRunner({
    store,
    feed: new JobFeed(),
    placement: new StaticPlacement({
      runners: [new SandboxClient({ url: sandboxUrl, token: t.stack.credentials.orchestrator })],
    }),
    tokens: new LlmProxyClient({ url: t.stack.urls["llm-proxy"], token: t.stack.credentials.orchestrator }),
    policy: new PermissionPolicy({ hooks: [new HookStage()] }),
    home,
    logger: createLogger({ name: "orchestrator-reattach", level: "error" }),
  });
  const repo = await makePluginRepo({
    agents: {
      careful:
        "name: careful\nruntime: harness:fake\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/fixer.md\nharness:\n  tools: [run_command]\n  requires_approval: [run_command]\n",
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
  const done = await eventually(async () => {
    const current = await store.getJob(job.id);
    return current && isTerminal(current.state) ? current : undefined;
  });
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "went on");
  assert.equal((await store.getPermission(job.id, waiting.id))?.delivered, true);
});
