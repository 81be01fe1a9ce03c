// needs: postgres
// A job whose session was placed on a node that then went silent, before
// anything was heard from the session (its replica died too): the replica
// taking the job over may start the session on a live node only when it is
// sure the session never did anything. The session's LLM-proxy token tells:
// revoking it says whether a model call ever carried it, and a revoked token
// is never used again. An unused one: the job runs on the live node, once. A
// used one: the session died with its node, the job fails saying so, and the
// model sees no second conversation. The replica that placed the session
// decides the same way when it is still alive.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { createLogger, stackTokenFor } from "@oz0/serving";
import { HookStage } from "../src/policy/hook-stage.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { isTerminal } from "../src/store/job-store.js";
import { LlmProxyClient } from "../src/sessions/llm-proxy-client.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { SandboxNodeRegistry } from "../src/cluster/sandbox-node-registry.js";
import { RegistryPlacement } from "../src/sessions/sandbox-placement.js";
import { databaseUrl, dropSchema, eventually, freshSchema, jobRecord } from "./postgres-test-support.js";
import { fakeAgentYaml, makePluginRepo, startTestStack, userInput, type TestStack } from "./support/test-stack.js";

/** Nothing listens here: the node that went silent. */
const GONE_URL = "http://127.0.0.1:1";

void describe("a session on a node that went silent before it was heard from", () => {
  const schema = freshSchema();
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-silent-node-"));
  let t: TestStack;
  let store: PostgresJobStore;
  let registry: SandboxNodeRegistry;
  let proxy: LlmProxyClient;
  let runner: JobRunner;
  let heartbeats: NodeJS.Timeout;

  before(async () => {
    t = await startTestStack({ pick: () => ({ text: "done" }) });
    store = await PostgresJobStore.open({ connectionString: databaseUrl(), schema, maxConnections: 4 });
    registry = await SandboxNodeRegistry.open({
      connection: { connectionString: databaseUrl(), schema, maxConnections: 2 },
      staleAfterMs: 1_500,
    });
    proxy = new LlmProxyClient({ url: t.stack.urls["llm-proxy"], token: t.stack.credentials.orchestrator });
    runner = new JobRunner({
      store,
      feed: new JobFeed(),
      placement: new RegistryPlacement({
        registry,
        sandboxToken: stackTokenFor(t.stack.credentials, "orchestrator", "sandbox"),
      }),
      tokens: proxy,
      policy: new PermissionPolicy({ hooks: [new HookStage()] }),
      home,
      logger: createLogger({ name: "orchestrator-silent-node", level: "error" }),
      reattachAttempts: 2,
    });
    const repo = await makePluginRepo({
      agents: {
        plain: fakeAgentYaml({ name: "plain", tools: "harness-defaults" }),
      },
    });
    await new PluginRegistry({ store, home }).install({ source: repo });
    // The gone node takes the sessions first, then stops sending heartbeats; the live node keeps sending them.
    await registry.register({ id: "gone", url: GONE_URL, capacity: 4 });
  });

  after(async () => {
    clearInterval(heartbeats);
    await runner?.close();
    await registry?.close();
    await store?.close();
    await t?.close();
    await dropSchema(schema);
    rmSync(home, { recursive: true, force: true });
  });

  /** A job as its dead replica left it: token minted, placed on a node (the gone one by default), nothing heard. */
  async function orphanedJob(
    id: string,
    node: { id: string; url: string } = { id: "gone", url: GONE_URL },
  ): Promise<{ token: string; headers: Record<string, string>; baseUrl: string }> {
    const sessionId = `ses_${id}`;
    const minted = await proxy.mint({ jobId: id, agent: "plain", sessionId });
    assert.equal((await registry.place({ sessionId, jobId: id }))?.node.id, node.id);
    await store.createJob(
      jobRecord(id, {
        agentName: "plain",
        input: `task ${id}`,
        sessionId,
        tokenId: minted.tokenId,
        sandboxUrl: node.url,
      }),
    );
    return { token: minted.token, headers: minted.headers, baseUrl: minted.anthropicBaseUrl };
  }

  const opened = (id: string): number => t.model.requests.filter((r) => userInput(r) === `task ${id}`).length;
  const ask = (
    session: { token: string; headers: Record<string, string>; baseUrl: string },
    id: string,
  ): Promise<Response> =>
    fetch(`${session.baseUrl}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": session.token, ...session.headers },
      body: JSON.stringify({
        model: "claude-sonnet-5-5",
        max_tokens: 10,
        messages: [{ role: "user", content: `task ${id}` }],
      }),
    });

  async function ended(id: string): Promise<NonNullable<Awaited<ReturnType<PostgresJobStore["getJob"]>>>> {
    return eventually(async () => {
      const job = await store.getJob(id);
      return job && isTerminal(job.state) ? job : undefined;
    }, `job ${id} ending`);
  }

  void it("starts a session whose token was never used on a live node, once, and its old token is dead", async () => {
    const never = await orphanedJob("never-used");
    // The harness did call the model on the gone node before it died.
    const used = await orphanedJob("used");
    assert.equal((await ask(used, "used")).status, 200);
    assert.equal(opened("used"), 1);

    await registry.register({ id: "live", url: t.stack.urls.sandbox, capacity: 4 });
    heartbeats = setInterval(() => void registry.heartbeat("live").catch(() => undefined), 200);
    await eventually(
      async () => ((await registry.lostSession("ses_used")) ? true : undefined),
      "the gone node counting as silent",
    );

    // This replica takes both jobs over, its node watch running meanwhile (it must leave jobs being resumed to their resume).
    runner.watchNodes({ intervalMs: 20 });
    await runner.resumeJob("never-used");
    await runner.resumeJob("used");

    const ran = await ended("never-used");
    assert.equal(ran.state, "succeeded", ran.error);
    assert.equal(ran.resultText, "done");
    assert.equal(ran.sandboxUrl, t.stack.urls.sandbox, "started on the live node");
    assert.notEqual(ran.sessionId, "ses_never-used", "as a new session: nothing done to the old one touches it");
    assert.equal(opened("never-used"), 1, "one conversation");
    assert.equal(
      (await ask(never, "never-used")).status,
      401,
      "the first session's token was revoked before the new start",
    );

    const lost = await ended("used");
    assert.equal(lost.state, "failed");
    assert.match(
      lost.error,
      /sandbox node gone \(http:\/\/127\.0\.0\.1:1\) stopped sending heartbeats at .*; its session ses_used is lost/,
    );
    assert.equal(opened("used"), 1, "not started a second time");
    assert.equal((await ask(used, "used")).status, 401, "its token is dead too");
  });

  void it("on a live node that does not know the session: starts it when its token is unused, fails it when used (the node restarted after it ran)", async () => {
    const live = { id: "live", url: t.stack.urls.sandbox };
    await orphanedJob("start-never-reached", live);
    const ranBefore = await orphanedJob("node-restarted", live);
    assert.equal((await ask(ranBefore, "node-restarted")).status, 200);

    await runner.resumeJob("start-never-reached");
    await runner.resumeJob("node-restarted");

    const ran = await ended("start-never-reached");
    assert.equal(ran.state, "succeeded", ran.error);
    assert.equal(opened("start-never-reached"), 1);
    const lost = await ended("node-restarted");
    assert.equal(lost.state, "failed");
    assert.match(lost.error, /its sandbox no longer knows it, and it had already called the model/);
    assert.equal(opened("node-restarted"), 1, "not started a second time");
  });

  void it("the live replica that placed a session starts it elsewhere when its node goes silent before it reached a model", async () => {
    // A node that accepts connections and never answers: the start never reaches a sandbox.
    const held = new Set<net.Socket>();
    const hole = net.createServer((socket) => void held.add(socket));
    await new Promise<void>((resolve) => hole.listen(0, "127.0.0.1", resolve));
    const holeUrl = `http://127.0.0.1:${(hole.address() as net.AddressInfo).port}`;
    try {
      await registry.register({ id: "hole", url: holeUrl, capacity: 100 });
      const job = await runner.runAgent({ agent: "plain", input: "task hole" });
      await eventually(
        async () => ((await store.getJob(job.id))?.sandboxUrl === holeUrl ? true : undefined),
        "the session placed on the silent node",
      );
      // Its heartbeats never come again; the node watch finds its session lost.
      runner.watchNodes({ intervalMs: 20 });
      const ran = await ended(job.id);
      assert.equal(ran.state, "succeeded", ran.error);
      assert.equal(ran.sandboxUrl, t.stack.urls.sandbox, "started on the live node");
      assert.notEqual(ran.sessionId, job.sessionId, "as a new session");
      assert.equal(opened("hole"), 1);
      assert.equal(await registry.lostSession(job.sessionId), undefined, "nothing left on the silent node");
    } finally {
      for (const socket of held) socket.destroy();
      hole.close();
    }
  });
});
