// Heartbeats to the orchestrator (OZ0_ORCHESTRATOR_URL): a real sandbox
// sending them to a stand-in SandboxNodeService on loopback, with its id,
// advertised URL, capacity, running count and the node token; a last one at
// capacity 0 when it closes, then none; an orchestrator that is down or
// refuses the token is logged and never stops the node serving sessions.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SandboxNodeService, type HeartbeatRequest } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { Authenticator, credentialDigest, registration, serve, type RunningServer } from "@oz0/serving";
import { configFromEnv, heartbeatSidecarConfigFromEnv, startHeartbeatSidecar, startSandbox } from "../src/index.js";
import { startNodeHeartbeat } from "../src/node-heartbeat.js";
import {
  isText,
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type LogLine,
} from "./sandbox-test-kit.js";
import { testCredentials } from "@oz0/serving/testing";

const TOKEN = "node-token-for-tests-0123456789";

interface Received {
  request: HeartbeatRequest;
  authorization: string | null;
}

/** A stand-in orchestrator: records every heartbeat; refuses any other token, as the real one does. */
async function startFakeOrchestrator(port = 0): Promise<{
  server: RunningServer;
  received: Received[];
  next(predicate: (r: Received) => boolean): Promise<Received>;
}> {
  const received: Received[] = [];
  let wake: (() => void)[] = [];
  const server = await serve({
    name: "fake-orchestrator",
    port,
    auth: new Authenticator({ nodeTokenSha256: credentialDigest(TOKEN) }),
    services: [
      registration(SandboxNodeService, {
        heartbeat(request, context) {
          const authorization = context.requestHeader.get("authorization");
          if (authorization !== `Bearer ${TOKEN}`)
            throw new ConnectError("the node token does not match", Code.Unauthenticated);
          received.push({ request, authorization });
          for (const w of wake) w();
          wake = [];
          return { placed: 0, staleAfterMs: 60_000 };
        },
      }),
    ],
  });
  return {
    server,
    received,
    async next(predicate) {
      const from = received.length;
      const deadline = Date.now() + WAIT_LIMIT_MS;
      for (;;) {
        const found = received.slice(from).find(predicate);
        if (found) return found;
        const left = deadline - Date.now();
        if (left <= 0)
          throw new Error(
            `no such heartbeat in ${WAIT_LIMIT_MS / 1000} s; since the wait began the orchestrator received ${JSON.stringify(
              received.slice(from).map((r) => [r.request.nodeId, r.request.capacity, r.request.running]),
            )}`,
          );
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, left);
          wake.push(() => {
            clearTimeout(timer);
            resolve();
          });
        });
      }
    },
  };
}

/**
 * How long a wait here may last before it fails saying what it waited for and
 * what it saw. Everything awaited takes milliseconds; this bounds a wait that
 * never ends (CI once sat an hour in this file and said only that it ran).
 */
const WAIT_LIMIT_MS = 60_000;

async function until(check: () => boolean, waitingFor: string, seen: () => unknown): Promise<void> {
  const deadline = Date.now() + WAIT_LIMIT_MS;
  while (!check()) {
    if (Date.now() > deadline)
      throw new Error(`waited ${WAIT_LIMIT_MS / 1000} s for ${waitingFor}; saw ${JSON.stringify(seen())}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** A loopback port where every connection is taken and dropped at once: an orchestrator that is down. */
async function dropConnections(): Promise<{ port: number; close(): Promise<void> }> {
  const server = net.createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () => new Promise<void>((resolve, reject) => server.close((error) => (error ? reject(error) : resolve()))),
  };
}

/** What the sandbox logged, one line each, for a wait's failure. */
const logged = (lines: LogLine[]) => () => lines.map((l) => `${l.level} ${l.msg} ${JSON.stringify(l.fields)}`);

/** Undone after every test of the file, last first. */
const cleanup: (() => Promise<void>)[] = [];
after(async () => {
  for (const c of cleanup.reverse()) await c();
});

void describe("node heartbeats", () => {
  void it("registers with its id, URL, capacity and running sessions, and drains on close", async () => {
    const orchestrator = await startFakeOrchestrator();
    cleanup.push(() => orchestrator.server.close());
    const t = await startTestSandbox({
      orchestratorUrls: [orchestrator.server.url],
      nodeToken: TOKEN,
      heartbeatMs: 100,
      maxSessions: 3,
    });
    let closed = false;
    cleanup.push(async () => {
      if (!closed) await t.close();
    });
    const port = new URL(t.sandbox.url).port;
    assert.deepEqual(t.sandbox.node, { id: `${os.hostname()}:${port}`, advertiseUrl: t.sandbox.url });

    const first = await orchestrator.next(() => true);
    assert.equal(first.authorization, `Bearer ${TOKEN}`);
    assert.deepEqual(
      [first.request.nodeId, first.request.url, first.request.capacity, first.request.running],
      [`${os.hostname()}:${port}`, t.sandbox.url, 3, 0],
    );

    // A running session is counted in the next heartbeats.
    const stream = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await stream.waitFor(isText("ready"), "ready");
    await orchestrator.next((r) => r.request.running === 1 && r.request.capacity === 3);

    // Closing: one heartbeat at capacity 0 (nothing more is placed here while the session is cancelled), then silence.
    await t.close();
    closed = true;
    await stream.finished;
    const last = orchestrator.received.at(-1)!;
    assert.equal(last.request.capacity, 0);
    const count = orchestrator.received.length;
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(orchestrator.received.length, count, "no heartbeat after close");
  });

  void it("keeps serving when the orchestrator is down, logging it once, and registers when it comes back", async () => {
    // The orchestrator's port drops every connection while it is down, and is held, so nothing
    // else takes the port before the orchestrator comes back on it.
    const down = await dropConnections();
    const port = down.port;
    const { logger, lines } = recordingLogger();
    const t = await startTestSandbox({
      orchestratorUrls: [`http://127.0.0.1:${port}`],
      nodeToken: TOKEN,
      heartbeatMs: 50,
      nodeId: "node-down",
      advertiseUrl: "http://node-down.internal:7701",
      logger,
    });
    cleanup.push(() => t.close());
    const failed = (): LogLine[] => lines.filter((l) => l.msg.startsWith("could not send a heartbeat"));
    await until(
      () => failed().length > 0 && lines.filter((l) => l.msg === "heartbeat failed again").length >= 3,
      "a failed heartbeat logged, then three more at debug",
      logged(lines),
    );
    assert.equal(failed().length, 1, "a lasting failure is logged once");
    assert.equal(failed()[0]!.level, "warn");

    const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(stream.exited().errorCode, "", "the node still runs sessions");

    // The orchestrator comes up on that port: the node registers without a restart.
    await down.close();
    const orchestrator = await startFakeOrchestrator(port);
    cleanup.push(() => orchestrator.server.close());
    const registered = await orchestrator.next((r) => r.request.nodeId === "node-down");
    assert.equal(registered.request.url, "http://node-down.internal:7701");
    await until(
      () => lines.some((l) => l.msg === "sending heartbeats to the orchestrator"),
      "the node to log that heartbeats go through",
      logged(lines),
    );
  });

  void it("logs an orchestrator that stays away once, however its failures read", async () => {
    // First something that takes each connection and drops it, then nothing at all on that port.
    const dropper = await dropConnections();
    const port = dropper.port;
    const { logger, lines } = recordingLogger();
    const heartbeat = startNodeHeartbeat({
      orchestratorUrls: [`http://127.0.0.1:${port}`],
      nodeToken: TOKEN,
      nodeId: "node-away",
      advertiseUrl: "http://127.0.0.1:7701",
      status: () => ({ capacity: 1, running: 0 }),
      intervalMs: 20,
      logger,
    });
    cleanup.push(() => heartbeat.stop());
    const failedAgain = (reason: RegExp) =>
      lines.filter((l) => l.msg === "heartbeat failed again" && reason.test(String(l.fields.err))).length;
    await until(() => failedAgain(/./) >= 2, "two more failures while connections are dropped", logged(lines));
    await dropper.close();
    await until(() => failedAgain(/ECONNREFUSED/) >= 2, "two failures once nothing listens", logged(lines));
    const warned = lines.filter((l) => l.level === "warn" || l.level === "error");
    assert.equal(warned.length, 1, `one warning for the whole outage; got ${JSON.stringify(logged(warned)())}`);
    assert.match(warned[0]!.msg, /^could not send a heartbeat/);
  });

  void it("sends each heartbeat on to the next orchestrator when one does not answer", async () => {
    const placeholder = await serve({ name: "placeholder", port: 0, services: [], auth: new Authenticator({}) });
    const deadPort = placeholder.port;
    await placeholder.close({ graceMs: 0 });
    const orchestrator = await startFakeOrchestrator();
    cleanup.push(() => orchestrator.server.close());
    const t = await startTestSandbox({
      orchestratorUrls: [`http://127.0.0.1:${deadPort}`, orchestrator.server.url],
      nodeToken: TOKEN,
      heartbeatMs: 50,
      nodeId: "node-failover",
    });
    cleanup.push(() => t.close());
    const first = await orchestrator.next((r) => r.request.nodeId === "node-failover");
    assert.equal(first.request.capacity > 0, true);
    // And stays with the one that answered.
    const count = orchestrator.received.length;
    await until(
      () => orchestrator.received.length >= count + 3,
      "three more heartbeats at the orchestrator that answered",
      () => orchestrator.received.length - count,
    );
  });

  void it("logs a refused token as an error and keeps serving", async () => {
    const orchestrator = await startFakeOrchestrator();
    cleanup.push(() => orchestrator.server.close());
    const { logger, lines } = recordingLogger();
    const t = await startTestSandbox({
      orchestratorUrls: [orchestrator.server.url],
      nodeToken: "not-the-token-0123456789",
      heartbeatMs: 50,
      logger,
    });
    cleanup.push(() => t.close());
    await until(() => lines.some((l) => l.level === "error"), "the refused token logged as an error", logged(lines));
    const refused = lines.find((l) => l.level === "error")!;
    assert.match(refused.msg, /refuses this node's heartbeats/);
    assert.equal(refused.fields.code, "Unauthenticated");
    assert.equal(orchestrator.received.length, 0);
    const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(stream.exited().errorCode, "");
  });

  void it("reads its settings from the environment and refuses an orchestrator URL without a token", async () => {
    const config = configFromEnv({
      OZ0_ORCHESTRATOR_URL: "http://orchestrator-0:7700, http://orchestrator-1:7700",
      OZ0_NODE_TOKEN: TOKEN,
      OZ0_NODE_ID: "node-7",
      OZ0_ADVERTISE_URL: "http://10.0.0.7:7701",
      OZ0_HEARTBEAT_MS: "2000",
    });
    assert.deepEqual(
      [config.orchestratorUrls, config.nodeToken, config.nodeId, config.advertiseUrl, config.heartbeatMs],
      [["http://orchestrator-0:7700", "http://orchestrator-1:7700"], TOKEN, "node-7", "http://10.0.0.7:7701", 2000],
    );
    assert.throws(
      () => configFromEnv({ OZ0_HEARTBEAT_MS: "0" }),
      /OZ0_HEARTBEAT_MS must be a whole number of milliseconds, at least 1; got "0"$/,
    );
    await assert.rejects(
      startSandbox({
        auth: testCredentials.settingsFor("sandbox"),
        orchestratorUrls: ["http://127.0.0.1:1"],
        root: "/nonexistent/never-created",
      }),
      /OZ0_ORCHESTRATOR_URL is set but OZ0_NODE_TOKEN is not/,
    );
    // The orchestrators would refuse every heartbeat with a token this short: refused at start instead.
    await assert.rejects(
      startSandbox({
        auth: testCredentials.settingsFor("sandbox"),
        orchestratorUrls: ["http://127.0.0.1:1"],
        nodeToken: "nodetok",
        root: "/nonexistent/never-created",
      }),
      /OZ0_NODE_TOKEN has 7 characters; the orchestrators refuse fewer than 16/,
    );
  });
});

const HEARTBEAT_MAIN = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "dist", "heartbeat-main.js");

void describe("heartbeat sidecar", () => {
  void it("registers the sandbox beside it with the sandbox's capacity and sessions, the node token only in its own process, and on SIGTERM drains until the sandbox is gone", async () => {
    const orchestrator = await startFakeOrchestrator();
    cleanup.push(() => orchestrator.server.close());
    // The sandbox knows nothing of orchestrators, and of the sidecar only the digest of the credential it lists
    // sessions with: sent the node token, it would refuse it, and no heartbeat would go.
    const forSandbox = `${TOKEN}-for-the-sandbox`;
    const t = await startTestSandbox({
      maxSessions: 3,
      auth: testCredentials.settingsFor("sandbox", { nodeTokenSha256: credentialDigest(forSandbox) }),
    });
    cleanup.push(() => t.close());
    assert.equal(t.sandbox.node, undefined);
    const child = spawn(process.execPath, [HEARTBEAT_MAIN], {
      env: {
        PATH: process.env.PATH ?? "",
        OZ0_SANDBOX_URL: t.sandbox.url,
        OZ0_ORCHESTRATOR_URL: orchestrator.server.url,
        OZ0_NODE_TOKEN: TOKEN,
        OZ0_NODE_TOKEN_FOR_SANDBOX: forSandbox,
        OZ0_NODE_ID: "pod-7",
        OZ0_ADVERTISE_URL: "http://10.0.0.7:7701",
        OZ0_HEARTBEAT_MS: "100",
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let log = "";
    child.stderr!.on("data", (chunk: Buffer) => (log += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    cleanup.push(async () => {
      child.kill("SIGKILL");
      await exited;
    });

    const first = await orchestrator.next((r) => r.request.nodeId === "pod-7");
    assert.equal(first.authorization, `Bearer ${TOKEN}`);
    assert.deepEqual(
      [first.request.url, first.request.capacity, first.request.running],
      ["http://10.0.0.7:7701", 3, 0],
    );

    const stream = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await stream.waitFor(isText("ready"), "ready");
    await orchestrator.next((r) => r.request.running === 1 && r.request.capacity === 3);
    stream.drop();
    await stream.finished;

    // SIGTERM (the pod is going): capacity 0 at once, and heartbeats go on while the sandbox ends its sessions.
    child.kill("SIGTERM");
    await orchestrator.next((r) => r.request.nodeId === "pod-7" && r.request.capacity === 0);
    const draining = orchestrator.received.length;
    await until(
      () => orchestrator.received.length >= draining + 2,
      "two heartbeats while the sandbox drains",
      () => orchestrator.received.length - draining,
    );
    assert.ok(
      orchestrator.received.slice(draining).every((r) => r.request.capacity === 0),
      "nothing more is placed on a draining node",
    );
    // The sandbox goes too: the sidecar sends a last heartbeat and exits.
    await t.close();
    assert.equal(await exited, 0, log);
    const last = orchestrator.received.at(-1)!;
    assert.deepEqual([last.request.nodeId, last.request.capacity], ["pod-7", 0], "the last heartbeat drains the node");
    assert.doesNotMatch(log, new RegExp(TOKEN), "the token is never logged");
    assert.doesNotMatch(log, /OZ0_NODE_TOKEN_FOR_SANDBOX is unset/);
  });

  void it("advertises a draining sandbox with capacity 0, and sends nothing while it does not answer", async () => {
    const orchestrator = await startFakeOrchestrator();
    cleanup.push(() => orchestrator.server.close());
    // The sidecar lists sessions with the node token, which this sandbox knows by its digest.
    const t = await startTestSandbox({
      maxSessions: 2,
      cancelGraceMs: 2_000,
      auth: testCredentials.settingsFor("sandbox", { nodeTokenSha256: credentialDigest(TOKEN) }),
    });
    let sandboxClosed = false;
    cleanup.push(async () => {
      if (!sandboxClosed) await t.close();
    });
    const { logger, lines } = recordingLogger();
    const sidecar = startHeartbeatSidecar({
      sandboxUrl: t.sandbox.url,
      orchestratorUrls: [orchestrator.server.url],
      nodeToken: TOKEN,
      nodeId: "pod-8",
      heartbeatMs: 50,
      logger,
    });
    cleanup.push(() => sidecar.stop());
    await orchestrator.next((r) => r.request.nodeId === "pod-8" && r.request.capacity === 2);
    // Without a credential of its own for the sandbox, it says what that leaves in the sandbox's memory.
    assert.equal(lines.filter((l) => l.msg.startsWith("OZ0_NODE_TOKEN_FOR_SANDBOX is unset")).length, 1);

    // A session that ignores SIGTERM keeps the sandbox draining for its cancel grace: meanwhile the node is advertised full.
    const stream = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "ignore-term" }) },
    });
    await stream.waitFor(isText("ready"), "ready");
    const closing = t.close();
    await orchestrator.next((r) => r.request.nodeId === "pod-8" && r.request.capacity === 0);
    await closing;
    sandboxClosed = true;
    await stream.finished;

    // Gone: no heartbeat, and one warning however long it lasts.
    await until(
      () => lines.some((l) => l.msg.startsWith("cannot read this node's status")),
      "the sidecar to log that the sandbox does not answer",
      logged(lines),
    );
    const count = orchestrator.received.length;
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(orchestrator.received.length, count, "no heartbeat for a sandbox that does not answer");
    assert.equal(lines.filter((l) => l.msg.startsWith("cannot read this node's status")).length, 1);
  });

  void it("reads its settings from the environment and names what is missing", () => {
    const config = heartbeatSidecarConfigFromEnv({
      OZ0_ORCHESTRATOR_URL: "http://orchestrator:7700",
      OZ0_NODE_TOKEN: TOKEN,
      OZ0_NODE_ID: "pod-9",
      OZ0_HEARTBEAT_MS: "5000",
    });
    assert.deepEqual(config, {
      sandboxUrl: "http://127.0.0.1:7701",
      orchestratorUrls: ["http://orchestrator:7700"],
      nodeToken: TOKEN,
      nodeId: "pod-9",
      heartbeatMs: 5000,
    });
    assert.throws(() => heartbeatSidecarConfigFromEnv({ OZ0_NODE_TOKEN: TOKEN }), /OZ0_ORCHESTRATOR_URL is required/);
    assert.throws(
      () => heartbeatSidecarConfigFromEnv({ OZ0_ORCHESTRATOR_URL: "http://orchestrator:7700" }),
      /OZ0_NODE_TOKEN is required/,
    );
    assert.throws(
      () =>
        heartbeatSidecarConfigFromEnv({ OZ0_ORCHESTRATOR_URL: "http://orchestrator:7700", OZ0_NODE_TOKEN: "short" }),
      /OZ0_NODE_TOKEN has 5 characters/,
    );
    assert.throws(
      () =>
        heartbeatSidecarConfigFromEnv({
          OZ0_ORCHESTRATOR_URL: "http://o:7700",
          OZ0_NODE_TOKEN: TOKEN,
          OZ0_SANDBOX_URL: "127.0.0.1:7701",
        }),
      /OZ0_SANDBOX_URL must be an http:\/\/ or https:\/\/ URL, such as http:\/\/127\.0\.0\.1:7701; got "127\.0\.0\.1:7701"$/,
    );
    const base = { OZ0_ORCHESTRATOR_URL: "http://o:7700", OZ0_NODE_TOKEN: TOKEN };
    assert.equal(
      heartbeatSidecarConfigFromEnv({ ...base, OZ0_NODE_IDENTITY_TOKEN_FILE: "/var/run/oz0/node-identity/token" })
        .identityTokenFile,
      "/var/run/oz0/node-identity/token",
    );
    assert.equal(
      heartbeatSidecarConfigFromEnv({ ...base, OZ0_NODE_TOKEN_FOR_SANDBOX: `${TOKEN}-sandbox` }).sandboxToken,
      `${TOKEN}-sandbox`,
    );
    assert.throws(
      () => heartbeatSidecarConfigFromEnv({ ...base, OZ0_NODE_TOKEN_FOR_SANDBOX: TOKEN }),
      /OZ0_NODE_TOKEN_FOR_SANDBOX is the same as OZ0_NODE_TOKEN; it must be a credential of its own/,
    );
    assert.throws(
      () => heartbeatSidecarConfigFromEnv({ ...base, OZ0_NODE_TOKEN_FOR_SANDBOX: "short" }),
      /OZ0_NODE_TOKEN_FOR_SANDBOX has 5 characters; use at least 16/,
    );
  });
});
