// A session whose processes hold more descriptors than a session may (OZ0_SESSION_MAX_OPEN_FILES) is stopped, and
// the others run on (session-open-files-guard.ts): the node's table of open files is one for everyone, and past it
// every open(2) of every other process fails.
import assert from "node:assert/strict";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

// The user mode needs root; elsewhere the sessions run as the sandbox's user in both others.
const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

for (const isolation of MODES)
  // Bounded: without the guard the holder keeps its 3,000 files and waits for ever.
  void it(
    `stops the session holding too many open files (${isolation}), and the others run on`,
    { timeout: 60_000 },
    async () => {
      const t = await startTestSandbox({ isolation, maxSessionOpenFiles: 2000, openFilesCheckMs: 50 });
      try {
        const idle = new SessionStream(t.client, {
          message: { case: "start", value: scenarioStart({ mode: "wait" }) },
        });
        await idle.waitFor(isText("ready"), "the idle session ready");
        // Below the limit, held across some twenty checks: it runs to its end.
        const within = await runToEnd(t.client, scenarioStart({ mode: "descriptors", count: 1000, holdMs: 1000 }));
        assert.equal(within.exited().status, SessionStatus.COMPLETED, within.exited().errorMessage);
        const holder = await runToEnd(t.client, scenarioStart({ mode: "descriptors", count: 3000 }));
        const exited = holder.exited();
        assert.equal(exited.status, SessionStatus.FAILED);
        assert.equal(exited.errorCode, "open_files_limit", exited.errorMessage);
        const held = Number(
          /^the session's processes held (\d+) open files \(descriptors\), above a session's limit of 2000 \(OZ0_SESSION_MAX_OPEN_FILES\); the session was stopped$/.exec(
            exited.errorMessage,
          )?.[1],
        );
        assert.ok(held > 2000 && held < 3100, `${exited.errorMessage}: the 3,000 it opened and its own few`);
        // The idle session held few: it still runs, and ends as asked.
        idle.send({ message: { case: "cancel", value: {} } });
        await idle.finished;
        assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
      } finally {
        await t.close();
      }
    },
  );
