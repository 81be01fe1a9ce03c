// start.share_working_dir_of: a harness operation's scratch session runs in
// its parent's live working directory (not a copy), which stays the parent's.
// Under the user isolation mode it runs under the parent's uid (the only one
// that can work in that directory), and its end leaves the parent running.
// The parent's end ends the sessions working in its directory before the
// sandbox (root) reads and removes it: under bubblewrap, a session left
// running there could swap a directory for a link while the removal walks it,
// and so empty another session's directory, or any on the node.
import assert from "node:assert/strict";
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { findSetpriv } from "../src/parent-death-launcher.js";
import {
  isText,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type TestSandbox,
} from "./sandbox-test-kit.js";

const userModeSkip =
  process.getuid?.() !== 0
    ? "the user isolation mode needs root"
    : findSetpriv() === undefined
      ? "the user isolation mode needs setpriv"
      : false;

for (const isolation of ["none", "user", "bwrap"] as const) {
  void describe(
    `RunSession sharing a live session's working directory (isolation ${isolation})`,
    { skip: isolation === "user" ? userModeSkip : false },
    () => {
      let t: TestSandbox;
      before(async () => {
        t = await startTestSandbox({ isolation });
      });
      after(async () => {
        await t.close();
      });

      void it("runs in the owner's directory, sees its files, and leaves the directory to the owner", async () => {
        const owner = new SessionStream(t.client, {
          message: {
            case: "start",
            value: scenarioStart(
              { mode: "wait" },
              {
                attachments: [
                  { path: "notes.txt", source: { case: "content", value: new TextEncoder().encode("original\n") } },
                ],
              },
            ),
          },
        });
        await owner.waitFor(isText("ready"), "ready");
        const ownerStarted = owner.received[0]?.message;
        assert(ownerStarted?.case === "started");
        const workingDir = ownerStarted.value.workingDir;

        const scratch = await runToEnd(t.client, {
          ...scenarioStart({ mode: "complete", edit: "notes.txt" }),
          shareWorkingDirOf: owner.sessionId,
        });
        const scratchStarted = scratch.received[0]?.message;
        assert(scratchStarted?.case === "started");
        assert.equal(scratchStarted.value.workingDir, workingDir);
        assert.equal(scratch.exited().status, SessionStatus.COMPLETED);
        const artifacts = scratch.received.find((m) => m.message.case === "artifacts")?.message.value as {
          patch: string;
        };
        assert.equal(artifacts.patch, "", "the shared directory's changes are the owner's patch");
        // The owner's directory outlives the scratch session, with what it wrote.
        assert.equal(readFileSync(path.join(workingDir, "notes.txt"), "utf8"), "original\nchanged by the harness\n");
        assert.equal(existsSync(path.join(workingDir, "hello.txt")), true);
        // Under uids of their own (the user mode; bubblewrap run by root), the owner's.
        if (t.sandbox.sessionUids !== undefined) {
          const ownerUid = statSync(workingDir).uid;
          assert.notEqual(ownerUid, 0);
          assert.equal(
            statSync(path.join(workingDir, "hello.txt")).uid,
            ownerUid,
            "the scratch session ran under the owner's uid",
          );
        }

        await t.client.cancelSession({ sessionId: owner.sessionId, reason: "done" });
        await owner.finished;
        // The owner was still running (the scratch session's end killed nothing of its uid): it answered the cancel itself.
        assert.equal(owner.exited().result?.text, "cancelled after cleanup");
        assert.equal(existsSync(workingDir), false);
      });

      void it("the owner's end ends the sessions working in its directory first, then removes it", async () => {
        const owner = new SessionStream(t.client, {
          message: { case: "start", value: scenarioStart({ mode: "wait" }) },
        });
        await owner.waitFor(isText("ready"), "ready");
        const ownerStarted = owner.received[0]?.message;
        assert(ownerStarted?.case === "started");
        const sharer = new SessionStream(t.client, {
          message: { case: "start", value: { ...scenarioStart({ mode: "wait" }), shareWorkingDirOf: owner.sessionId } },
        });
        await sharer.waitFor(isText("ready"), "ready");

        await t.client.cancelSession({ sessionId: owner.sessionId, reason: "done" });
        await Promise.all([owner.finished, sharer.finished]);
        assert.equal(sharer.exited().status, SessionStatus.CANCELLED);
        assert.match(
          sharer.exited().cancelReason,
          new RegExp(`the session whose working directory it shares \\(${owner.sessionId}\\) ended`),
        );
        // The sharer was gone before the owner's directory was read and removed (the owner's exit is logged after).
        const endOf = (s: SessionStream): number =>
          Number(s.exited().endTime!.seconds) * 1e3 + s.exited().endTime!.nanos / 1e6;
        assert.ok(endOf(sharer) <= endOf(owner), `${endOf(sharer)} <= ${endOf(owner)}`);
        assert.equal(existsSync(ownerStarted.value.workingDir), false);
      });

      void it("refuses to share the directory of a session that is not running", async () => {
        await assert.rejects(
          runToEnd(t.client, { ...scenarioStart({ mode: "complete" }), shareWorkingDirOf: "no-such-session" }).then(
            (s) => {
              if (s.error) throw s.error;
            },
          ),
          (error: unknown) => {
            const err = ConnectError.from(error);
            assert.equal(err.code, Code.FailedPrecondition);
            assert.match(err.message, /share_working_dir_of: session no-such-session is not running on this node/);
            return true;
          },
        );
      });
    },
  );
}
