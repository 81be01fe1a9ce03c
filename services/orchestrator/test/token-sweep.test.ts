// A session token stays valid at the LLM proxy until a revoke of it succeeds,
// and nothing else ends it. On the real stack, with the orchestrator reaching
// the proxy's control API through a relay the test can cut (the harness's
// model calls go to the proxy directly): a job that ends while the proxy is
// away has its token revoked by the sweep once the proxy answers again, and a
// token whose revoke failed before the orchestrator died is revoked by the
// next orchestrator's start-up sweep. A job started again under its session
// is not given a new token while its earlier one cannot be revoked (a sweep
// still holding that one would end the new one with it).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import Database from "better-sqlite3";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { consoleClients, GUARDED_INSTRUCTIONS, writeGuardedPlugin } from "./support/console-browser.js";
import { liveTokensOf } from "./support/proxy-tokens.js";
import { TcpRelay } from "./support/tcp-relay.js";
import { eventually, startTestStack, type TestStack } from "./support/test-stack.js";

let t: TestStack;
let relay: TcpRelay;
let relayUrl: string;
const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-token-sweep-"));
const owner = () => consoleClients(t.url, t.stack.ownerToken);

function pick({ turn, request }: { turn: number; request: ScriptedRequest }): ScriptedTurn {
  const system = JSON.stringify(request.body?.system ?? "");
  assert.ok(system.includes(GUARDED_INSTRUCTIONS), "only the guarded agent runs here");
  return turn === 0 ? { toolCalls: [{ name: "run_command", input: { command: "echo hi" } }] } : { text: "done" };
}

before(async () => {
  const repo = await writeGuardedPlugin(path.join(scratch, "guarded"));
  t = await startTestStack({ pick: pick as unknown as Parameters<typeof startTestStack>[0]["pick"] });
  await owner().plugins.installPlugin({ source: repo });
  const proxy = new URL(t.stack.urls["llm-proxy"]);
  relay = new TcpRelay({ host: proxy.hostname, port: Number(proxy.port) });
  relayUrl = `http://127.0.0.1:${await relay.listen()}`;
});

after(async () => {
  await t?.close();
  await relay?.close();
  rmSync(scratch, { recursive: true, force: true });
});

/** Starts a guarded job and lets its one call run once the proxy's control API is cut off: the job ends meanwhile. */
async function jobEndingWhileTheProxyIsAway(input: string): Promise<string> {
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input });
  const jobId = job!.id;
  const [approval] = await eventually(async () => {
    const { approvals } = await owner().jobs.listApprovals({ jobId });
    return approvals.length > 0 ? approvals : undefined;
  });
  // The proxy commits a token it minted up to a second later.
  await eventually(async () => (liveTokensOf(t.home, jobId).length === 1 ? true : undefined), "the live token");
  relay.cut();
  await owner().jobs.answerPermission({ jobId, callId: approval!.callId, allow: true });
  await eventually(async () =>
    (await owner().jobs.getJob({ jobId })).job?.state === JobState.SUCCEEDED ? true : undefined,
  );
  // The end's revoke failed, and the log says so.
  await eventually(async () =>
    readFileSync(path.join(t.home, "logs", "orchestrator.log"), "utf8")
      .split("\n")
      .some((line) => line.includes(`"jobId":"${jobId}"`) && line.includes("could not revoke the session token"))
      ? true
      : undefined,
  );
  return jobId;
}

void test("a job that ends while the LLM proxy is away: its token is revoked once the proxy answers again", async () => {
  await t.restartOrchestrator({ OZ0_LLM_PROXY_URL: relayUrl, OZ0_TOKEN_SWEEP_MS: "300" });
  const jobId = await jobEndingWhileTheProxyIsAway("away");
  // Several sweeps run while the proxy cannot be reached: the token is still live, and kept.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  assert.equal(liveTokensOf(t.home, jobId).length, 1, "the failed revoke left the token live");
  relay.resume();
  await eventually(async () => (liveTokensOf(t.home, jobId).length === 0 ? true : undefined), "the sweep's revoke");
});

void test("a token whose revoke failed before the orchestrator died is revoked by the next one's start-up sweep", async () => {
  // No sweep on an interval within the test: only the one at start-up can revoke it.
  await t.restartOrchestrator({ OZ0_LLM_PROXY_URL: relayUrl, OZ0_TOKEN_SWEEP_MS: "3600000" });
  const jobId = await jobEndingWhileTheProxyIsAway("died");
  assert.equal(liveTokensOf(t.home, jobId).length, 1, "the failed revoke left the token live");
  relay.resume();
  await t.restartOrchestrator({ OZ0_LLM_PROXY_URL: relayUrl, OZ0_TOKEN_SWEEP_MS: "3600000" });
  await eventually(async () => (liveTokensOf(t.home, jobId).length === 0 ? true : undefined), "the start-up sweep");
});

void test("a job started again while its earlier token cannot be revoked fails, rather than get a second token", async () => {
  await t.restartOrchestrator({ OZ0_LLM_PROXY_URL: relayUrl, OZ0_TOKEN_SWEEP_MS: "3600000" });
  const { job } = await owner().jobs.runAgent({ agent: "guarded", input: "again" });
  const jobId = job!.id;
  await eventually(async () => ((await owner().jobs.listApprovals({ jobId })).approvals.length > 0 ? true : undefined));
  // As a start whose token was stored but whose session never reached a node (the orchestrator died first).
  await t.orchestrator.stop({ signal: "SIGKILL" });
  const db = new Database(path.join(t.home, "orchestrator.db"));
  try {
    db.pragma("busy_timeout = 5000");
    db.prepare("UPDATE jobs SET state = 'pending', sandbox_url = '', sandbox_seq = 0 WHERE id = ?").run(jobId);
  } finally {
    db.close();
  }
  relay.cut();
  await t.restartOrchestrator({ OZ0_LLM_PROXY_URL: relayUrl, OZ0_TOKEN_SWEEP_MS: "3600000" });
  const ended = await eventually(async () => {
    const current = (await owner().jobs.getJob({ jobId })).job;
    return current?.state === JobState.FAILED ? current : undefined;
  });
  assert.match(ended.error, /could not revoke the session's earlier token at the LLM proxy, so no new one is minted/);
  relay.resume();
});
