import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { runToEnd, scenarioStart, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";
import { testCredentials } from "@oz0/serving/testing";

void describe("RunSession without isolation", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none" });
  });
  after(async () => {
    await t.close();
  });

  void it("runs a session to its result with seqs 1..n, and returns the patch and named files", async () => {
    const stream = await runToEnd(
      t.client,
      scenarioStart(
        { mode: "complete", edit: "notes.txt" },
        {
          attachments: [
            { path: "notes.txt", source: { case: "content", value: new TextEncoder().encode("original\n") } },
          ],
          artifactPaths: ["hello.txt", "missing.txt"],
        },
      ),
    );
    assert.equal(stream.error, undefined);
    assert.deepEqual(
      stream.received.map((m) => Number(m.seq)),
      stream.received.map((_, i) => i + 1),
    );
    assert.deepEqual(
      stream.received.map((m) => m.message.case),
      ["started", "event", "event", "event", "event", "artifacts", "exited"],
    );
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.COMPLETED);
    assert.equal(exited.result?.stopReason, StopReason.COMPLETED);
    assert.deepEqual(exited.how, { case: "exitCode", value: 0 });
    const artifacts = stream.received.find((m) => m.message.case === "artifacts")?.message.value as {
      patch: string;
      files: { path: string; content: Uint8Array }[];
      error: string;
    };
    assert.match(artifacts.patch, /\+hello from the harness/);
    assert.match(artifacts.patch, /notes\.txt[\s\S]*original\n\+changed by the harness/);
    assert.deepEqual(
      artifacts.files.map((f) => [f.path, new TextDecoder().decode(f.content)]),
      [["hello.txt", "hello from the harness\n"]],
    );
    const started = stream.received[0]?.message;
    assert.equal(started?.case, "started");
  });

  void it("removes the session's directories once it has ended", async () => {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    const started = stream.received[0]?.message;
    assert(started?.case === "started");
    const { existsSync } = await import("node:fs");
    assert.equal(existsSync(started.value.workingDir), false);
    assert.equal(existsSync(started.value.stateDir), false);
  });

  void it("lists sessions and cancels one by id", async () => {
    const { SessionStream, isText } = await import("./sandbox-test-kit.js");
    const stream = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await stream.waitFor(isText("ready"), "ready");
    const listed = await t.client.listSessions({});
    const mine = listed.sessions.find((s) => s.sessionId === stream.sessionId);
    assert.equal(mine?.status, SessionStatus.RUNNING);
    assert.equal(mine?.jobId, "job-1");
    const cancelled = await t.client.cancelSession({ sessionId: stream.sessionId, reason: "test says stop" });
    assert.equal(cancelled.cancelled, true);
    await stream.finished;
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.CANCELLED);
    assert.equal(exited.result?.stopReason, StopReason.CANCELLED);
    assert.equal(exited.cancelReason, "test says stop");
    assert.equal((await t.client.cancelSession({ sessionId: stream.sessionId })).cancelled, false);
    await assert.rejects(
      t.client.cancelSession({ sessionId: "no-such-session" }),
      (e: unknown) => ConnectError.from(e).code === Code.NotFound,
    );
  });

  void it("relays a permission answer from the stream to the harness", async () => {
    const { SessionStream } = await import("./sandbox-test-kit.js");
    const stream = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "permission" }, {}, { permissions: true }) },
    });
    await stream.waitFor(
      (m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest",
      "a permission request",
    );
    stream.send({ message: { case: "permissionAnswer", value: { id: "nope", allow: true } } });
    const rejected = await stream.waitFor((m) => m.message.case === "rejected", "a rejection");
    assert.equal(rejected.seq, 0n);
    assert.equal(rejected.message.case === "rejected" && rejected.message.value.code, "unknown_permission_id");
    stream.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
    await stream.finished;
    assert.equal(stream.exited().result?.text, "allowed");
    assert.deepEqual(stream.texts(), ["answer p1 allow=true outcome=OUTCOME_ANSWERED"]);
  });

  void it("uses the working directory the request names inside the root, and refuses a second session on it without touching the first", async () => {
    const { SessionStream, isText } = await import("./sandbox-test-kit.js");
    const { existsSync } = await import("node:fs");
    const path = await import("node:path");
    const workingDir = path.join(t.root, "jobs", "job-7", "work");
    const first = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "wait" }, {}, { workingDir }) },
    });
    await first.waitFor(isText("ready"), "ready");
    const started = first.received[0]?.message;
    assert(started?.case === "started");
    assert.equal(started.value.workingDir, workingDir);
    const second = await runToEnd(t.client, scenarioStart({ mode: "complete" }, {}, { workingDir }));
    const error = ConnectError.from(second.error);
    assert.equal(error.code, Code.InvalidArgument);
    assert.match(error.rawMessage, /^start\.request\.working_dir: already exists/);
    assert.equal(existsSync(workingDir), true);
    first.send({ message: { case: "cancel", value: {} } });
    await first.finished;
    assert.equal(existsSync(workingDir), false);
  });
});

void it("refuses a node_path attachment that leads into, or holds, its root or a hidden path, links resolved", async () => {
  const { mkdtempSync, rmSync, symlinkSync, writeFileSync } = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const secrets = mkdtempSync(path.join(os.tmpdir(), "oz0-hidden-"));
  const elsewhere = mkdtempSync(path.join(os.tmpdir(), "oz0-elsewhere-"));
  writeFileSync(path.join(secrets, "owner"), "the owner's credential\n");
  writeFileSync(path.join(elsewhere, "notes.txt"), "for the agent\n");
  symlinkSync(path.join(secrets, "owner"), path.join(elsewhere, "innocent.txt"));
  const guarded = await startTestSandbox({ isolation: "none", hiddenPaths: [secrets] });
  try {
    const attach = (nodePath: string) =>
      runToEnd(
        guarded.client,
        scenarioStart(
          { mode: "complete" },
          { attachments: [{ path: "a", source: { case: "nodePath", value: nodePath } }] },
        ),
      );
    for (const [nodePath, guard] of [
      [path.join(secrets, "owner"), secrets],
      [path.join(elsewhere, "innocent.txt"), secrets],
      [guarded.root, guarded.root],
      [path.dirname(guarded.root), guarded.root],
    ] as const) {
      const refused = ConnectError.from((await attach(nodePath)).error);
      assert.equal(refused.code, Code.InvalidArgument, nodePath);
      assert.equal(
        refused.rawMessage,
        `start.attachments[0].node_path: leads into or holds ${guard}, which the sandbox never hands to a session (its sessions, the suite's data, the hidden paths); attach files from elsewhere`,
      );
    }
    const allowed = await attach(path.join(elsewhere, "notes.txt"));
    assert.equal(allowed.error, undefined);
    assert.equal(allowed.exited().status, SessionStatus.COMPLETED);
  } finally {
    await guarded.close();
    rmSync(secrets, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  }
});

void it("removes what a previous run left in the root when it starts", async () => {
  const { mkdirSync, mkdtempSync, existsSync, rmSync, writeFileSync } = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const { startSandbox } = await import("../src/index.js");
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-stale-"));
  try {
    mkdirSync(path.join(root, "sessions", "old", "work"), { recursive: true });
    writeFileSync(path.join(root, "sessions", "old", "work", "file"), "left behind");
    mkdirSync(path.join(root, "internal", "old"), { recursive: true });
    mkdirSync(path.join(root, "unrelated"));
    const sandbox = await startSandbox({
      auth: testCredentials.settingsFor("sandbox"),
      port: 0,
      root,
      isolation: "none",
    });
    await sandbox.close();
    assert.equal(existsSync(path.join(root, "sessions", "old")), false);
    assert.equal(existsSync(path.join(root, "internal", "old")), false);
    assert.equal(existsSync(path.join(root, "unrelated")), true);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
