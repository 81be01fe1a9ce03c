// needs: postgres
// Sandbox nodes that register themselves: real sandbox processes sending
// heartbeats to the orchestrator's SandboxNodeService over a real PostgreSQL
// registry, RegistryPlacement placing real sessions on them by free
// capacity, a node killed mid-session no longer placed on and its session
// reported lost with the reason its job fails with, a node shutting down
// drained at once, heartbeats without the node token refused, and a node
// that comes back at another address found by its id, its session kept.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { ProtocolVersion, SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SandboxNodeService } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { stackTokenFor, type RunningServer } from "@oz0/serving";
import { startServiceProcess, type StackProcess } from "../src/dev/embedded-stack.js";
import { SandboxNodeRegistry } from "../src/cluster/sandbox-node-registry.js";
import { DEFAULT_MAX_NODE_CAPACITY, sandboxNodeServices, startNodeListener } from "../src/rpc/sandbox-node-service.js";
import { testCredentials } from "@oz0/serving/testing";
import { RegistryPlacement } from "../src/sessions/sandbox-placement.js";
import type { SessionChannel, SessionRunner } from "../src/sessions/session-runner.js";
import { databaseUrl, dropSchema, eventually, freshSchema } from "./postgres-test-support.js";
import { repoRoot } from "./support/test-stack.js";

const TOKEN = "sandbox-node-token-for-tests-0123456789";
// Heartbeats every 200 ms against a 3 s stale limit: a node is judged gone only after many missed ones.
const STALE_AFTER_MS = 3_000;
const HEARTBEAT_MS = "200";

// A harness that starts and then holds its session (its slot) until it is cancelled.
const HOLDING_HARNESS = `
  require("node:readline").createInterface({ input: process.stdin }).once("line", () => {
    console.log(JSON.stringify({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "hold" } }));
    setInterval(() => {}, 1000);
  });`;

const run = (file: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
  new Promise((resolve) => {
    execFile(file, args, (error, stdout, stderr) =>
      resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
  });

void describe("sandbox nodes", () => {
  const schema = freshSchema();
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-nodes-"));
  const processes: StackProcess[] = [];
  const started = new Map<string, StackProcess>();
  const channels: SessionChannel[] = [];
  let registry: SandboxNodeRegistry;
  /** The same rows, judged with a long stale limit: shows a node's last capacity after it stopped. */
  let observer: SandboxNodeRegistry;
  let server: RunningServer;
  let placement: RegistryPlacement;
  let client: Client<typeof SandboxNodeService>;

  async function startNode(id: string, env: Record<string, string> = {}): Promise<StackProcess> {
    const node = await startServiceProcess({
      name: "sandbox",
      env: {
        ...testCredentials.envFor("sandbox"),
        OZ0_ORCHESTRATOR_URL: server.url,
        OZ0_NODE_TOKEN: TOKEN,
        OZ0_NODE_ID: id,
        OZ0_HEARTBEAT_MS: HEARTBEAT_MS,
        OZ0_MAX_SESSIONS: "1",
        OZ0_ISOLATION: "none",
        OZ0_CANCEL_GRACE_MS: "2000",
        OZ0_SANDBOX_ROOT: path.join(dir, id),
        ...env,
      },
      logFile: path.join(dir, `${id}.log`),
    });
    processes.push(node);
    started.set(id, node);
    return node;
  }

  /** Starts a session that holds its slot, and waits until the node runs it. */
  async function hold(runner: SessionRunner, sessionId: string): Promise<SessionChannel> {
    const channel = runner.start({
      request: create(SessionRequestSchema, {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
        sessionId,
        jobId: `job-${sessionId}`,
        input: "hold",
      }),
      command: [process.execPath, "-e", HOLDING_HARNESS],
      pluginDir: dir,
      attachments: [],
    });
    channels.push(channel);
    for await (const message of channel) if (message.kind === "event" && message.event.event.case === "started") break;
    return channel;
  }

  const live = async (): Promise<string[]> => (await registry.listLive()).map((n) => n.id).sort();

  before(async () => {
    const connection = { connectionString: databaseUrl(), schema, maxConnections: 4 };
    registry = await SandboxNodeRegistry.open({ connection, staleAfterMs: STALE_AFTER_MS });
    observer = await SandboxNodeRegistry.open({ connection, staleAfterMs: 3_600_000 });
    server = await startNodeListener({ registry, nodeToken: TOKEN, host: "127.0.0.1", port: 0 });
    placement = new RegistryPlacement({
      registry,
      sandboxToken: stackTokenFor(testCredentials.services, "orchestrator", "sandbox"),
    });
    client = createClient(SandboxNodeService, createGrpcTransport({ baseUrl: server.url }));
  });

  after(async () => {
    for (const channel of channels) channel.close();
    await Promise.all(processes.map((p) => p.stop({ signal: "SIGKILL" })));
    await server.close({ graceMs: 0 });
    await registry.close();
    await observer.close();
    await dropSchema(schema);
    rmSync(dir, { recursive: true, force: true });
  });

  void it("places sessions on live nodes with room, and reports the session of a killed node lost", async () => {
    const a = await startNode("node-a");
    const b = await startNode("node-b");
    const nodes = await eventually(async () => {
      const found = await registry.listLive();
      return found.length === 2 ? found : undefined;
    }, "both nodes registered");
    assert.deepEqual(nodes.map((n) => [n.id, n.url, n.capacity, n.placed]).sort(), [
      ["node-a", a.url, 1, 0],
      ["node-b", b.url, 1, 0],
    ]);

    // One session each (the least loaded node first), then no room anywhere: the job would wait.
    const first = await placement.place({ jobId: "job-s1", sessionId: "s1" });
    const second = await placement.place({ jobId: "job-s2", sessionId: "s2" });
    assert.deepEqual([first?.url, second?.url].sort(), [a.url, b.url].sort());
    assert.equal(await placement.place({ jobId: "job-s3", sessionId: "s3" }), undefined);
    assert.equal(placement.runnerFor(first!.url), first, "one runner per node, re-found by the job's sandboxUrl");
    const onA = first!.url === a.url ? { runner: first!, sessionId: "s1" } : { runner: second!, sessionId: "s2" };
    const onB = first!.url === a.url ? { runner: second!, sessionId: "s2" } : { runner: first!, sessionId: "s1" };
    await hold(onA.runner, onA.sessionId);
    await hold(onB.runner, onB.sessionId);

    // node-a dies without a word: after the stale limit it is gone, and its session is lost.
    await a.stop({ signal: "SIGKILL" });
    const lost = await eventually(async () => {
      const found = await placement.lostSessions();
      return found.length > 0 ? found : undefined;
    }, "node-a's session reported lost");
    assert.deepEqual(
      lost.map((l) => [l.sessionId, l.jobId, l.nodeId, l.nodeUrl]),
      [[onA.sessionId, `job-${onA.sessionId}`, "node-a", a.url]],
    );
    assert.match(
      lost[0]!.reason,
      new RegExp(
        `^sandbox node node-a \\(${a.url.replaceAll(".", "\\.")}\\) stopped sending heartbeats at \\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z; its session ${onA.sessionId} is lost — resuming a session on another node is not supported`,
      ),
    );
    assert.deepEqual(await live(), ["node-b"]);

    // Its job failed and the slot was released: node-a has room again but, silent, gets nothing.
    await placement.release(onA.sessionId);
    assert.deepEqual(await placement.lostSessions(), []);
    assert.equal(
      await placement.place({ jobId: "job-s3", sessionId: "s3" }),
      undefined,
      "nothing is placed on a node without heartbeats",
    );

    // node-b's session ends: its slot is the one s3 gets.
    await onB.runner.cancel({ sessionId: onB.sessionId, reason: "test over" });
    await placement.release(onB.sessionId);
    assert.equal((await placement.place({ jobId: "job-s3", sessionId: "s3" }))?.url, b.url);
    await placement.release("s3");
  });

  void it("drains a node that shuts down: capacity 0 at once, then gone", async () => {
    const c = await startNode("node-c", { OZ0_MAX_SESSIONS: "4" });
    await eventually(async () => ((await live()).includes("node-c") ? true : undefined), "node-c registered");
    await c.stop();
    const last = (await observer.listLive()).find((n) => n.id === "node-c");
    assert.deepEqual([last?.capacity, last?.url], [0, c.url], "its last heartbeat said it takes no more sessions");
    await eventually(async () => ((await live()).includes("node-c") ? undefined : true), "node-c no longer live");
  });

  void it("refuses heartbeats without the node token", async () => {
    const heartbeat = { nodeId: "intruder", url: "http://10.6.6.6:7701", capacity: 100, running: 0 };
    for (const headers of [{}, { authorization: "Bearer not-the-node-token-0123456789" }, { authorization: TOKEN }]) {
      await assert.rejects(client.heartbeat(heartbeat, { headers }), (e: unknown) => {
        const err = ConnectError.from(e);
        assert.equal(err.code, Code.Unauthenticated);
        assert.match(err.rawMessage, /OZ0_NODE_TOKEN/);
        return true;
      });
    }
    const authorization = `Bearer ${TOKEN}`;
    await assert.rejects(
      client.heartbeat({ ...heartbeat, url: "ftp://10.6.6.6" }, { headers: { authorization } }),
      (e: unknown) => ConnectError.from(e).code === Code.InvalidArgument,
    );
    await assert.rejects(
      client.heartbeat({ ...heartbeat, nodeId: "" }, { headers: { authorization } }),
      (e: unknown) => ConnectError.from(e).code === Code.InvalidArgument,
    );
    // A node that claims room for nearly every session would be given nearly every job: refused, saying what to set.
    // So are an address with a path (the orchestrator's own credential would follow it anywhere) and a document.
    for (const [bad, message] of [
      [
        { capacity: DEFAULT_MAX_NODE_CAPACITY + 1 },
        /capacity 257 is more than the 256 sessions .*OZ0_MAX_SESSIONS.*OZ0_MAX_NODE_CAPACITY/,
      ],
      [{ url: "http://10.6.6.6:7701/admin/" }, /must be a plain http:\/\/ or https:\/\/ URL with no path/],
      [{ url: `http://10.6.6.6:7701/?${"x".repeat(600)}` }, /url has 622 characters, more than 512/],
    ] as const) {
      await assert.rejects(client.heartbeat({ ...heartbeat, ...bad }, { headers: { authorization } }), (e: unknown) => {
        const err = ConnectError.from(e);
        return err.code === Code.InvalidArgument && message.test(err.rawMessage);
      });
    }
    assert.equal(
      (await observer.listLive()).find((n) => n.id === "intruder"),
      undefined,
    );
    assert.throws(() => sandboxNodeServices({ registry, nodeToken: "" }), /OZ0_NODE_TOKEN must be set/);

    // A real node with the wrong token keeps running, says why in its log, and is never placed on.
    const wrong = await startNode("node-wrong-token", { OZ0_NODE_TOKEN: "not-the-node-token-0123456789" });
    await eventually(
      async () => (readFileSync(wrong.logFile, "utf8").includes("refuses this node's heartbeats") ? true : undefined),
      "the refusal in the node's log",
    );
    assert.equal(
      (await observer.listLive()).find((n) => n.id === "node-wrong-token"),
      undefined,
    );
  });

  void it("answers Heartbeat through buf curl, with the node token", async () => {
    const buf = path.join(repoRoot, "node_modules/@bufbuild/buf/bin/buf");
    const args = ["curl", "--protocol", "grpc", "--http2-prior-knowledge"];
    const method = `${server.url}/oz0.orchestrator.v1.SandboxNodeService/Heartbeat`;
    const data = JSON.stringify({ nodeId: "curl-node", url: "http://10.9.9.9:7701/", capacity: 4, running: 1 });
    // Reflection, too, needs a principal; the node token is the only one this listener knows.
    const anonymous = await run(buf, [...args, "--list-methods", server.url]);
    assert.notEqual(anonymous.code, 0);
    const listed = await run(buf, [
      ...args,
      "-H",
      `authorization: Bearer ${TOKEN}`,
      "--reflect-header",
      "*",
      "--list-methods",
      server.url,
    ]);
    assert.match(listed.stdout, /oz0\.orchestrator\.v1\.SandboxNodeService\/Heartbeat/);
    const called = await run(buf, [
      ...args,
      "-H",
      `authorization: Bearer ${TOKEN}`,
      "--reflect-header",
      "*",
      "--data",
      data,
      method,
    ]);
    assert.equal(called.code, 0, called.stderr);
    assert.deepEqual(JSON.parse(called.stdout), { staleAfterMs: STALE_AFTER_MS });
    const node = (await registry.listLive()).find((n) => n.id === "curl-node");
    assert.deepEqual([node?.url, node?.capacity], ["http://10.9.9.9:7701", 4]);
    // Reflection with the token, the call itself without: the call is refused.
    const refused = await run(buf, [
      ...args,
      "--reflect-header",
      `authorization: Bearer ${TOKEN}`,
      "--data",
      data,
      method,
    ]);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /unauthenticated/);
  });

  void it("finds a session's node by its id when the node comes back at another address, with the session kept", async () => {
    // Under bubblewrap a session outlives its sandbox; the sandbox started again (same id and root) listens on a new port.
    const env = { OZ0_ISOLATION: "bwrap", OZ0_SESSION_ORPHAN_MS: "60000" };
    // The only live node, so the session is placed there.
    await started.get("node-b")?.stop({ signal: "SIGKILL" });
    const first = await startNode("node-moves", env);
    await eventually(
      async () => ((await live()).join() === "node-moves" ? true : undefined),
      "the moving node the only one live",
    );
    const runner = await placement.place({ jobId: "job-moves", sessionId: "s-moves" });
    assert.equal(runner?.url, first.url);
    const channel = runner!.start({
      request: create(SessionRequestSchema, {
        protocolVersion: ProtocolVersion.PROTOCOL_VERSION_1,
        sessionId: "s-moves",
        jobId: "job-moves",
        input: "hold",
      }),
      command: [process.execPath, "-e", HOLDING_HARNESS],
      pluginDir: repoRoot,
      attachments: [],
    });
    let lastSeq = 0;
    for await (const message of channel) {
      lastSeq = message.seq;
      if (message.kind === "event" && message.event.event.case === "started") break;
    }
    channel.close();
    await first.stop({ signal: "SIGKILL" });
    const second = await startNode("node-moves", env);
    assert.notEqual(second.url, first.url, "the node came back at another address");
    const moved = await eventually(async () => {
      const found = await placement.runnerForSession({ sessionId: "s-moves", sandboxUrl: first.url });
      return found.url === second.url ? found : undefined;
    }, "the session's node found at its new address");
    // The session is there: re-attached after the last seq seen, then cancelled, it ends.
    const resumed = moved.reattach({ sessionId: "s-moves", afterSeq: lastSeq });
    channels.push(resumed);
    await moved.cancel({ sessionId: "s-moves", reason: "the test is done" });
    const kinds: string[] = [];
    for await (const message of resumed) {
      assert.ok(message.seq > lastSeq, "nothing seen before is sent again");
      kinds.push(message.kind);
    }
    assert.equal(kinds.at(-1), "exited", kinds.join(","));
  });
});
