// The sandbox client against a node that is gone: a stream opened to it
// fails when it is read, never before, so a replica re-attaching to a dead
// node's sessions (reading the store in between) does not crash.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { ConnectError, Code } from "@connectrpc/connect";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { SandboxRefusedError, SessionNotFoundError } from "../src/sessions/session-runner.js";

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
