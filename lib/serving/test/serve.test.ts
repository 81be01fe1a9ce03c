import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { once } from "node:events";
import type { ClientHttp2Session, Settings } from "node:http2";
import { createRequire } from "node:module";
import { test } from "node:test";
import { promisify } from "node:util";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport, createConnectTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus as ServingStatus } from "@oz0/proto/grpc/health/v1/health_pb";
import { Authenticator } from "../src/auth/authenticator.js";
import { MAX_CONCURRENT_STREAMS } from "../src/protocol-sniffing-server.js";
import { serve } from "../src/serve.js";
import { testCredentials } from "../src/testing.js";

const auth = new Authenticator(testCredentials.settingsFor("orchestrator"));
const bearer = `authorization: Bearer ${testCredentials.owner}`;

const run = promisify(execFile);
const buf = createRequire(import.meta.url).resolve("@bufbuild/buf/bin/buf");

void test("health tells liveness from readiness over gRPC and Connect", async () => {
  const server = await serve({ name: "test", auth, port: 0, services: [], readyOnListen: false });
  try {
    const grpc = createClient(
      Health,
      createGrpcTransport({ baseUrl: server.url, interceptors: [testCredentials.caller] }),
    );
    const connect = createClient(Health, createConnectTransport({ baseUrl: server.url, httpVersion: "1.1" }));
    assert.equal((await grpc.check({ service: "liveness" })).status, ServingStatus.SERVING);
    assert.equal((await connect.check({ service: "readiness" })).status, ServingStatus.NOT_SERVING);
    server.health.setReady(true);
    assert.equal((await grpc.check({ service: "readiness" })).status, ServingStatus.SERVING);
    await assert.rejects(grpc.check({ service: "nope" }), (e: unknown) => ConnectError.from(e).code === Code.NotFound);
  } finally {
    await server.close({ graceMs: 100 });
  }
});

void test("buf curl lists and calls services through reflection", async () => {
  const server = await serve({ name: "test", auth, port: 0, services: [] });
  try {
    // Reflection needs a principal; health does not.
    await assert.rejects(
      run(buf, ["curl", "--protocol", "grpc", "--http2-prior-knowledge", "--list-methods", server.url]),
    );
    const list = await run(buf, [
      "curl",
      "--protocol",
      "grpc",
      "--http2-prior-knowledge",
      "-H",
      bearer,
      "--reflect-header",
      "*",
      "--list-methods",
      server.url,
    ]);
    assert.match(list.stdout, /grpc\.health\.v1\.Health\/Check/);
    const check = await run(buf, [
      // buf curl learns the schema through reflection, so even a health call through it presents a credential.
      "curl",
      "--protocol",
      "grpc",
      "--http2-prior-knowledge",
      "-H",
      bearer,
      "--reflect-header",
      "*",
      "-d",
      '{"service":"liveness"}',
      `${server.url}/grpc.health.v1.Health/Check`,
    ]);
    assert.deepEqual(JSON.parse(check.stdout), { status: "SERVING" });
  } finally {
    await server.close({ graceMs: 100 });
  }
});

void test("a server on ::1 answers clients that send an unbracketed IPv6 authority, and survives malformed requests", async () => {
  const server = await serve({ name: "test", auth, host: "::1", port: 0, services: [] });
  try {
    const grpc = createClient(
      Health,
      createGrpcTransport({ baseUrl: server.url, interceptors: [testCredentials.caller] }),
    );
    assert.equal((await grpc.check({ service: "liveness" })).status, ServingStatus.SERVING);
    const http2 = await import("node:http2");
    const session = http2.connect(server.url);
    const status = await new Promise<number>((resolve, reject) => {
      const stream = session.request({
        ":path": "/grpc.health.v1.Health/Check",
        ":method": "POST",
        ":authority": "a:b:c",
      });
      stream.on("response", (headers) => resolve(Number(headers[":status"])));
      stream.on("error", reject);
      stream.end();
    });
    session.close();
    assert.equal(status, 400);
    assert.equal((await grpc.check({ service: "liveness" })).status, ServingStatus.SERVING);
  } finally {
    await server.close({ graceMs: 100 });
  }
});

// The timeout only turns a hang (no disconnect at all) into a failure; the server is told 300 ms.
void test(
  "a client that stalls before its headers are complete is disconnected, and others are served",
  { timeout: 60_000 },
  async () => {
    const { connect } = await import("node:net");
    const server = await serve({ name: "test", port: 0, services: [], auth, headersTimeoutMs: 300 });
    try {
      const stall = (bytes: string): Promise<void> =>
        new Promise((resolve, reject) => {
          const socket = connect(server.port, "127.0.0.1", () => socket.write(bytes));
          socket.on("error", reject);
          // Read what comes back (a 408, or nothing), so the server's close is seen.
          socket.resume();
          socket.on("close", () => resolve());
        });
      // Mid-headers over HTTP/1.1, and before the protocol is even known.
      await stall("POST /grpc.health.v1.Health/Check HTTP/1.1\r\nHost: x\r\ncontent-type: applic");
      await stall("PRI * HT");
      const grpc = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
      assert.equal((await grpc.check({ service: "liveness" })).status, ServingStatus.SERVING);
    } finally {
      await server.close({ graceMs: 100 });
    }
  },
);

/** A model call over HTTP/2 that sends part of its body and stops, as a session holding the proxy's bytes would. */
function stalledUpload(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    void import("node:http2").then(({ connect }) => {
      const session = connect(url);
      session.on("error", reject);
      const stream = session.request({ ":method": "POST", ":path": "/v1/messages", "content-length": "100" });
      stream.write("{".padEnd(10, " "));
      let status = 0;
      let body = "";
      stream.on("response", (headers) => (status = Number(headers[":status"])));
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => (body += chunk));
      stream.on("error", () => undefined);
      stream.on("close", () => {
        session.close();
        resolve({ status, body });
      });
    }, reject);
  });
}

// The timeouts only turn a hang into a failure; the server is told 300 ms.
void test(
  "an HTTP/2 request whose body stops arriving is answered 408, while a bidi-streaming RPC stays open past the timeout",
  { timeout: 60_000 },
  async () => {
    const { ServerReflection, ServerReflectionRequestSchema } =
      await import("@oz0/proto/grpc/reflection/v1/reflection_pb");
    const { create } = await import("@bufbuild/protobuf");
    const server = await serve({
      name: "test",
      port: 0,
      services: [],
      auth,
      requestTimeoutMs: 300,
      // The body is read as it comes, as the LLM proxy's model calls read theirs.
      fallback: (req, res) => {
        req.resume();
        req.on("end", () => res.end("whole"));
      },
    });
    try {
      const stalled = await stalledUpload(server.url);
      assert.equal(stalled.status, 408);
      assert.match(stalled.body, /did not arrive within 300 ms/);
      // Reflection is bidi-streaming: its request stream is open for the whole call, here well past 300 ms.
      const reflection = createClient(
        ServerReflection,
        createGrpcTransport({ baseUrl: server.url, interceptors: [testCredentials.caller] }),
      );
      async function* asks() {
        yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
        await new Promise((r) => setTimeout(r, 1_000));
        yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
      }
      let answers = 0;
      for await (const answer of reflection.serverReflectionInfo(asks())) {
        assert.equal(answer.messageResponse.case, "listServicesResponse");
        answers += 1;
      }
      assert.equal(answers, 2, "both asks were answered on the one stream");
    } finally {
      await server.close({ graceMs: 100 });
    }
  },
);

/** An HTTP/2 session of its own to `url`: the GOAWAY it got (its code and the last stream the server took), and its end. */
async function watchedSession(url: string) {
  const http2 = await import("node:http2");
  const session = http2.connect(url);
  session.on("error", () => undefined);
  const goaways: { code: number; lastStreamID: number }[] = [];
  session.on("goaway", (code, lastStreamID) => goaways.push({ code, lastStreamID }));
  const closed = new Promise<void>((resolve) => session.once("close", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    session.once("connect", () => resolve());
    session.once("error", reject);
  });
  return { session, goaways, closed };
}

/** One health check on `session` (its own stream); its HTTP status. */
function healthOver(session: ClientHttp2Session): Promise<number> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/json",
    });
    let status = 0;
    stream.on("response", (headers) => (status = Number(headers[":status"])));
    stream.on("error", reject);
    stream.resume();
    stream.on("close", () => resolve(status));
    stream.end('{"service":"liveness"}');
  });
}

// The timeouts only turn a hang into a failure; the server is told 300 ms and 500 ms.
void test(
  "an HTTP/2 connection that opens no stream in time, or has none open for the idle time, is closed",
  { timeout: 60_000 },
  async () => {
    const server = await serve({
      name: "test",
      port: 0,
      services: [],
      auth,
      headersTimeoutMs: 300,
      idleSessionTimeoutMs: 500,
    });
    try {
      // Connected, and never a request: what 2,000 connections did to hold 30 MB.
      const silent = await watchedSession(server.url);
      await silent.closed;
      assert.ok(silent.goaways.length > 0, "told to go away, not cut off");
      assert.ok(
        silent.goaways.every((g) => g.code === 0 && g.lastStreamID === 0),
        `gracefully, no stream taken: ${JSON.stringify(silent.goaways)}`,
      );
      // One request, then quiet.
      const quiet = await watchedSession(server.url);
      assert.equal(await healthOver(quiet.session), 200);
      await quiet.closed;
      assert.ok(quiet.goaways.length > 0);
      assert.ok(
        quiet.goaways.every((g) => g.code === 0 && g.lastStreamID === 1),
        `gracefully, its one stream taken: ${JSON.stringify(quiet.goaways)}`,
      );
    } finally {
      await server.close({ graceMs: 100 });
    }
  },
);

void test("a connection holding a long call stays open past the idle time", { timeout: 60_000 }, async () => {
  const { ServerReflection, ServerReflectionRequestSchema } =
    await import("@oz0/proto/grpc/reflection/v1/reflection_pb");
  const { create } = await import("@bufbuild/protobuf");
  const server = await serve({ name: "test", port: 0, services: [], auth, idleSessionTimeoutMs: 200 });
  try {
    // Reflection is bidi-streaming: one stream open for 1.2 s, six idle times, nothing sent for 600 ms twice.
    const reflection = createClient(
      ServerReflection,
      createGrpcTransport({ baseUrl: server.url, interceptors: [testCredentials.caller] }),
    );
    async function* asks() {
      for (let i = 0; i < 3; i++) {
        if (i > 0) await new Promise((r) => setTimeout(r, 600));
        yield create(ServerReflectionRequestSchema, { messageRequest: { case: "listServices", value: "" } });
      }
    }
    let answers = 0;
    for await (const answer of reflection.serverReflectionInfo(asks())) {
      assert.equal(answer.messageResponse.case, "listServicesResponse");
      answers += 1;
    }
    assert.equal(answers, 3, "every ask answered on the one stream");
  } finally {
    await server.close({ graceMs: 100 });
  }
});

void test("an HTTP/2 connection is told how many streams it may have open at once", async () => {
  const server = await serve({ name: "test", port: 0, services: [], auth });
  try {
    const http2 = await import("node:http2");
    const client = http2.connect(server.url);
    const [remote] = (await once(client, "remoteSettings")) as [Settings];
    // Node's own default is 2^32-1, each stream with its buffers, for a client with no credential.
    assert.equal(remote.maxConcurrentStreams, MAX_CONCURRENT_STREAMS);
    assert.equal(MAX_CONCURRENT_STREAMS, 1000);
    client.destroy();
  } finally {
    await server.close({ graceMs: 100 });
  }
});
