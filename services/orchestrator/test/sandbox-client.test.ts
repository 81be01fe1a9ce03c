// The sandbox client against a node that is gone: a stream opened to it
// fails when it is read, never before, so a replica re-attaching to a dead
// node's sessions (reading the store in between) does not crash.
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { test } from "node:test";
import { ConnectError, Code } from "@connectrpc/connect";
import { SandboxClient } from "../src/sandbox-client.js";

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
