// The sandbox client against a node that is gone: a stream opened to it
// fails when it is read, never before, so a replica re-attaching to a dead
// node's sessions (reading the store in between) does not crash. And against
// a node that answers more than a session's artifacts can hold. Each message
// says what the node sent for it, for the session's byte budget.
import assert from "node:assert/strict";
import { createServer as createHttp2Server } from "node:http2";
import { createServer } from "node:net";
import { test } from "node:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { ConnectError, Code } from "@connectrpc/connect";
import { compressionGzip, connectNodeAdapter } from "@connectrpc/connect-node";
import {
  RunSessionResponseSchema,
  SandboxService,
  type RunSessionResponse,
} from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { SANDBOX_READ_MAX_BYTES, SandboxClient } from "../src/sessions/sandbox-client.js";
import {
  SandboxAnswerTooLargeError,
  SandboxRefusedError,
  SessionNotFoundError,
} from "../src/sessions/session-runner.js";

async function refusedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

void test("a session stream to an unreachable node fails when read, and not as an unhandled rejection before", async () => {
  const unhandled: unknown[] = [];
  const record = (reason: unknown): void => {
    unhandled.push(reason);
  };
  process.on("unhandledRejection", record);
  try {
    const client = new SandboxClient({ url: `http://127.0.0.1:${await refusedPort()}` });
    const channel = client.reattach({ sessionId: "ses_gone", afterSeq: 3 });
    // What the job runner does before it reads the stream: other awaits, long enough for the connect to fail.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await assert.rejects(
      (async () => {
        for await (const message of channel) assert.fail(`no message expected, got ${message.kind}`);
      })(),
      (error: unknown) => error instanceof ConnectError && error.code === Code.Unavailable,
    );
    await assert.rejects(channel.answerPermission({} as never), /the session stream is closed/);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off("unhandledRejection", record);
  }
});

void test("a sandbox that refuses this orchestrator's credential gives a typed error naming what to set, not a stream to retry", async () => {
  const { startSandbox } = await import("@oz0/sandbox");
  const { testCredentials } = await import("@oz0/serving/testing");
  const { stackTokenFor } = await import("@oz0/serving");
  const { mkdtempSync, rmSync } = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-refused-"));
  const sandbox = await startSandbox({
    port: 0,
    root,
    isolation: "none",
    auth: testCredentials.settingsFor("sandbox"),
  });
  try {
    // The orchestrator's general credential too: sandboxes take its credential for them alone.
    const general = testCredentials.services.orchestrator;
    for (const token of [undefined, testCredentials.services["llm-proxy"], testCredentials.owner, general]) {
      const channel = new SandboxClient({ url: sandbox.url, token }).reattach({ sessionId: "ses_any", afterSeq: 0 });
      await assert.rejects(
        (async () => {
          for await (const message of channel) assert.fail(`no message expected, got ${message.kind}`);
        })(),
        (error: unknown) =>
          error instanceof SandboxRefusedError &&
          /refused this orchestrator .*OZ0_SERVICE_TOKEN_FOR_SANDBOX.*OZ0_PEER_ORCHESTRATOR_SHA256/.test(error.message),
      );
    }
    // With the orchestrator's credential the same call reaches the sandbox, which does not know the session.
    const forSandbox = stackTokenFor(testCredentials.services, "orchestrator", "sandbox");
    const known = new SandboxClient({ url: sandbox.url, token: forSandbox }).reattach({
      sessionId: "ses_any",
      afterSeq: 0,
    });
    await assert.rejects(
      (async () => {
        for await (const message of known) assert.fail(`no message expected, got ${message.kind}`);
      })(),
      (error: unknown) => error instanceof SessionNotFoundError,
    );
  } finally {
    await sandbox.close();
    rmSync(root, { recursive: true, force: true });
  }
});

/** A node on loopback whose RunSession answers with `responses`, whatever it is asked (`signal`: the call's end). */
async function fakeNode(
  responses: (signal: AbortSignal) => AsyncGenerator<RunSessionResponse>,
): Promise<{ url: string; close(): Promise<void> }> {
  const handler = connectNodeAdapter({
    acceptCompression: [compressionGzip],
    compressMinBytes: 1024,
    routes: (router) =>
      router.service(SandboxService, {
        runSession: (_requests, context) => responses(context.signal),
        listSessions: () => ({}),
        cancelSession: () => ({}),
      }),
  });
  const server = createHttp2Server(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

void test("a node's answer larger than SANDBOX_READ_MAX_BYTES decompressed fails the stream for good", async () => {
  // What a rogue node (or a URL a heartbeat registered) sends: gzip that inflates to past the limit.
  const node = await fakeNode(async function* () {
    yield create(RunSessionResponseSchema, { seq: 1n, sessionId: "ses_big", message: { case: "started", value: {} } });
    yield create(RunSessionResponseSchema, {
      seq: 2n,
      sessionId: "ses_big",
      message: { case: "artifacts", value: { patch: "+".repeat(SANDBOX_READ_MAX_BYTES + 1024) } },
    });
  });
  try {
    const channel = new SandboxClient({ url: node.url }).reattach({ sessionId: "ses_big", afterSeq: 0 });
    const kinds: string[] = [];
    await assert.rejects(
      (async () => {
        for await (const message of channel) kinds.push(message.kind);
      })(),
      (error: unknown) =>
        error instanceof SandboxAnswerTooLargeError &&
        /answered a message larger than the orchestrator reads .*readMaxBytes 33554432.*OZ0_MAX_ARTIFACT_BYTES/.test(
          error.message,
        ),
    );
    assert.deepEqual(kinds, ["started"], "the message before the big one arrives");
    channel.close();
  } finally {
    await node.close();
  }
});

void test("stderr is the followed session's, whatever session id the node puts on each piece", async () => {
  // Stored per session: a node that named a new session on every piece stored a job's stderr without bound.
  const node = await fakeNode(async function* () {
    for (let i = 1; i <= 3; i++)
      yield create(RunSessionResponseSchema, {
        seq: BigInt(i),
        sessionId: `ses_invented_${i}`,
        message: { case: "stderr", value: { text: `line ${i}\n` } },
      });
  });
  try {
    const channel = new SandboxClient({ url: node.url }).reattach({ sessionId: "ses_followed", afterSeq: 0 });
    const ids: string[] = [];
    for await (const message of channel) if (message.kind === "stderr") ids.push(message.sessionId);
    assert.deepEqual(ids, ["ses_followed", "ses_followed", "ses_followed"]);
  } finally {
    await node.close();
  }
});

void test("each message says how many bytes the node sent for it, what answered nothing of the session's included", async () => {
  // What the session's byte budget counts (session-driver.ts): a node cannot send unweighed.
  const responses = [
    create(RunSessionResponseSchema, { seq: 1n, sessionId: "ses_w", message: { case: "started", value: {} } }),
    create(RunSessionResponseSchema, {
      seq: 2n,
      sessionId: "ses_w",
      message: { case: "stderr", value: { text: "é".repeat(1000) } },
    }),
    // Answers this stream only: no message of its own, weighed with the next.
    create(RunSessionResponseSchema, { message: { case: "rejected", value: { code: "x", message: "y".repeat(500) } } }),
    create(RunSessionResponseSchema, {
      seq: 3n,
      sessionId: "ses_w",
      message: {
        case: "artifacts",
        value: { patch: "+ü\n", files: [{ path: "out/é.bin", content: new Uint8Array(3000) }], error: "some" },
      },
    }),
  ];
  const node = await fakeNode(async function* (signal) {
    yield* responses;
    // Open until the client lets it go, as a session's stream is: one that ended while the client's half was open
    // could reach it as a reset before its last message.
    await new Promise((resolve) => signal.addEventListener("abort", resolve));
  });
  try {
    const channel = new SandboxClient({ url: node.url }).reattach({ sessionId: "ses_w", afterSeq: 0 });
    const weighed: [number, number | undefined][] = [];
    for await (const message of channel) {
      weighed.push([message.seq, message.bytes]);
      if (weighed.length === 3) break;
    }
    channel.close();
    const encoded = (i: number): number => toBinary(RunSessionResponseSchema, responses[i]!).byteLength;
    // Each message and each artifact file counts at least what storing one costs: a node's messages of a few bytes
    // were stored many times over what they weighed (attacker review).
    const stored = 512;
    assert.ok(encoded(0) < stored && encoded(2) < stored);
    assert.deepEqual(weighed, [
      [1, stored],
      [2, encoded(1)],
      // Artifacts by what they hold (the patch, the files' paths and contents, the node's error), and what
      // storing the message and each file costs; the rejected answer before them as it weighed, at least that.
      [
        3,
        stored +
          stored +
          stored +
          Buffer.byteLength("+ü\n") +
          Buffer.byteLength("out/é.bin") +
          3000 +
          Buffer.byteLength("some"),
      ],
    ]);
    assert.ok(encoded(1) > 2000, "the stderr piece is weighed in bytes, not characters");
  } finally {
    await node.close();
  }
});
