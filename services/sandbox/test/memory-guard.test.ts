// A session whose processes take more memory than a session may (OZ0_SESSION_MAX_MEMORY_BYTES) is stopped, whatever
// process of it took it, and the others run on (session-memory-guard.ts).
import assert from "node:assert/strict";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { processMemory } from "../src/session-memory-guard.js";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

const MIB = 1024 * 1024;

// The user mode needs root; elsewhere the sessions run as the sandbox's user in both others.
const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

for (const isolation of MODES)
  // Bounded: without the guard the hog takes its 512 MiB and waits for ever.
  void it(`stops the session over its memory (${isolation}), and the others run on`, { timeout: 60_000 }, async () => {
    const t = await startTestSandbox({ isolation, maxSessionMemoryBytes: 192 * MIB, memoryCheckMs: 50 });
    try {
      const idle = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
      await idle.waitFor(isText("ready"), "the idle session ready");
      const hog = await runToEnd(t.client, scenarioStart({ mode: "hog", mib: 512 }));
      const exited = hog.exited();
      assert.equal(exited.status, SessionStatus.FAILED);
      assert.equal(exited.errorCode, "memory_limit", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^the session's processes took \d+\.\d MiB of memory, above a session's limit of 192\.0 MiB \(OZ0_SESSION_MAX_MEMORY_BYTES\); the session was stopped$/,
      );
      // The idle session took far less: it still runs, and ends as asked.
      idle.send({ message: { case: "cancel", value: {} } });
      await idle.finished;
      assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
    } finally {
      await t.close();
    }
  });

void it("reads what a process takes: the anonymous memory it wrote", () => {
  const before = processMemory(process.pid);
  const block = Buffer.alloc(64 * MIB, 1);
  const after = processMemory(process.pid);
  assert.ok(after - before >= 60 * MIB, `${before} then ${after} bytes`);
  assert.equal(block[block.length - 1], 1);
  assert.equal(processMemory(2 ** 22 + 1), 0, "a process that does not exist takes nothing");
});
