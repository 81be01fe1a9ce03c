// start.share_working_dir_of: a harness operation's scratch session runs in
// its parent's live working directory (not a copy), which stays the parent's.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

void describe("RunSession sharing a live session's working directory", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none" });
  });
  after(async () => {
    await t.close();
  });

  void it("runs in the owner's directory, sees its files, and leaves the directory to the owner", async () => {
    const owner = new SessionStream(t.client, {
      message: {
        case: "start",
        value: scenarioStart({ mode: "wait" }, { attachments: [{ path: "notes.txt", source: { case: "content", value: new TextEncoder().encode("original\n") } }] }),
      },
    });
    await owner.waitFor(isText("ready"), "ready");
    const ownerStarted = owner.received[0]?.message;
    assert(ownerStarted?.case === "started");
    const workingDir = ownerStarted.value.workingDir;

    const scratch = await runToEnd(t.client, { ...scenarioStart({ mode: "complete", edit: "notes.txt" }), shareWorkingDirOf: owner.sessionId });
    const scratchStarted = scratch.received[0]?.message;
    assert(scratchStarted?.case === "started");
    assert.equal(scratchStarted.value.workingDir, workingDir);
    assert.equal(scratch.exited().status, SessionStatus.COMPLETED);
    const artifacts = scratch.received.find((m) => m.message.case === "artifacts")?.message.value as { patch: string };
    assert.equal(artifacts.patch, "", "the shared directory's changes are the owner's patch");
    // The owner's directory outlives the scratch session, with what it wrote.
    assert.equal(readFileSync(path.join(workingDir, "notes.txt"), "utf8"), "original\nchanged by the harness\n");
    assert.equal(existsSync(path.join(workingDir, "hello.txt")), true);

    await t.client.cancelSession({ sessionId: owner.sessionId, reason: "done" });
    await owner.finished;
  });

  void it("refuses to share the directory of a session that is not running", async () => {
    await assert.rejects(
      runToEnd(t.client, { ...scenarioStart({ mode: "complete" }), shareWorkingDirOf: "no-such-session" }).then((s) => {
        if (s.error) throw s.error;
      }),
      (error: unknown) => {
        const err = ConnectError.from(error);
        assert.equal(err.code, Code.FailedPrecondition);
        assert.match(err.message, /share_working_dir_of: session no-such-session is not running on this node/);
        return true;
      },
    );
  });
});
