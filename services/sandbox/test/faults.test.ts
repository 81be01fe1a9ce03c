// Harness misbehaviour ends that session with a specific error; bad requests
// are refused with INVALID_ARGUMENT naming the field; the node keeps going.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  isText,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
  type TestSandbox,
} from "./sandbox-test-kit.js";

/** Alive and not a zombie (a killed orphan stays a zombie until some init reaps it). */
function processAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX]/.test(stat);
  } catch {
    return false;
  }
}

void describe("faults", () => {
  let t: TestSandbox;
  before(async () => {
    t = await startTestSandbox({ isolation: "none", cancelGraceMs: 500, maxLineBytes: 1024, maxSessionEvents: 50 });
  });
  after(async () => {
    await t.close();
  });

  const cases: {
    mode: Record<string, unknown>;
    code: string;
    status: SessionStatus;
    request?: Record<string, unknown>;
  }[] = [
    { mode: { mode: "garbage" }, code: "invalid_json", status: SessionStatus.FAILED },
    { mode: { mode: "no-result" }, code: "no_result", status: SessionStatus.FAILED },
    { mode: { mode: "big-line", bytes: 4096 }, code: "line_too_long", status: SessionStatus.FAILED },
    { mode: { mode: "two-results" }, code: "duplicate_result", status: SessionStatus.FAILED },
    { mode: { mode: "event-after-result" }, code: "event_after_result", status: SessionStatus.FAILED },
    { mode: { mode: "exit-after-result", code: 3 }, code: "nonzero_exit_after_result", status: SessionStatus.FAILED },
    {
      mode: { mode: "exit-after-result", signal: "SIGHUP" },
      code: "nonzero_exit_after_result",
      status: SessionStatus.FAILED,
    },
    {
      mode: { mode: "usage-loop", turns: 5 },
      code: "max_turns_exceeded",
      status: SessionStatus.FAILED,
      request: { limits: { maxTurns: 2 } },
    },
    { mode: { mode: "chatty", events: 500 }, code: "too_many_events", status: SessionStatus.FAILED },
  ];
  for (const c of cases) {
    const how = c.mode.signal ? ` (${String(c.mode.signal)})` : c.mode.code ? ` (code ${String(c.mode.code)})` : "";
    void it(`ends a session whose harness does ${String(c.mode.mode)}${how} with ${c.code}`, async () => {
      const stream = await runToEnd(t.client, scenarioStart(c.mode, {}, c.request));
      const exited = stream.exited();
      assert.equal(exited.errorCode, c.code, exited.errorMessage);
      assert.equal(exited.status, c.status);
      assert.notEqual(exited.errorMessage, "");
    });
  }

  void it("stops a session whose events pass OZ0_MAX_SESSION_LOG_BYTES, keeping no more than that and one line", async () => {
    // 40 lines of 900 bytes, each under the line limit and the event count, 36 KB in all past a 16 KB cap.
    const bulky = await startTestSandbox({ isolation: "none", maxLineBytes: 1024, maxSessionLogBytes: 16 * 1024 });
    try {
      const stream = await runToEnd(bulky.client, scenarioStart({ mode: "chatty", events: 40, chunkBytes: 900 }));
      const exited = stream.exited();
      assert.equal(exited.errorCode, "log_too_large", exited.errorMessage);
      assert.equal(exited.status, SessionStatus.FAILED);
      assert.match(exited.errorMessage, /more than 16384 bytes of events \(OZ0_MAX_SESSION_LOG_BYTES\)/);
      const kept = stream.received.filter((m) => m.message.case === "event");
      assert.ok(kept.length >= 16 && kept.length < 20, `${kept.length} events kept of 40`);
    } finally {
      await bulky.close();
    }
  });

  for (const isolation of ["none", "bwrap"] as const) {
    void it(`stops a session (${isolation}) whose stdout passes OZ0_MAX_SESSION_STDOUT_BYTES in blank lines, which no event cap counts`, async () => {
      const capped = await startTestSandbox({ isolation, maxSessionStdoutBytes: 1024 * 1024 });
      try {
        const stream = await runToEnd(
          capped.client,
          scenarioStart({ mode: "flood", stream: "stdout", bytes: 64 * 1024 * 1024 }),
        );
        const exited = stream.exited();
        assert.equal(exited.errorCode, "stdout_too_large", exited.errorMessage);
        assert.match(
          exited.errorMessage,
          /^the harness wrote more than 1048576 bytes to stdout \(OZ0_MAX_SESSION_STDOUT_BYTES\); the rest was not read and the session was stopped$/,
        );
      } finally {
        await capped.close();
      }
    });
  }

  void it("names the exit code, or the signal, of a harness that failed after its completed result", async () => {
    const coded = (await runToEnd(t.client, scenarioStart({ mode: "exit-after-result", code: 3 }))).exited();
    assert.equal(
      coded.errorMessage,
      "the harness exited with code 3 after writing a completed result; a harness exits with code 0 once its result is out",
    );
    assert.equal(
      coded.result?.text,
      "done",
      "the result is still reported, for diagnosis; the status says not to trust it",
    );
    const signalled = (
      await runToEnd(t.client, scenarioStart({ mode: "exit-after-result", signal: "SIGHUP" }))
    ).exited();
    assert.equal(
      signalled.errorMessage,
      "the harness was ended by SIGHUP after writing a completed result; a harness exits with code 0 once its result is out",
    );
  });

  void it("lets an error result end with a failing exit: the exit agrees with the result", async () => {
    const exited = (await runToEnd(t.client, scenarioStart({ mode: "error-exit" }))).exited();
    assert.equal(exited.status, SessionStatus.COMPLETED);
    assert.equal(exited.errorCode, "");
    assert.deepEqual(exited.how, { case: "exitCode", value: 1 });
    assert.equal(exited.result?.error, "the work failed");
  });

  void it("kills a harness that ignores SIGTERM after the grace (ignored_sigterm)", async () => {
    const stream = new SessionStream(t.client, {
      message: { case: "start", value: scenarioStart({ mode: "ignore-term" }) },
    });
    await stream.waitFor(isText("ready"), "ready");
    stream.send({ message: { case: "cancel", value: {} } });
    await stream.finished;
    const exited = stream.exited();
    assert.equal(exited.errorCode, "ignored_sigterm");
    assert.equal(exited.status, SessionStatus.CANCELLED);
    assert.deepEqual(exited.how, { case: "signal", value: "SIGKILL" });
  });

  void it("times a session out at its deadline", async () => {
    const stream = await runToEnd(
      t.client,
      scenarioStart({ mode: "wait" }, {}, { limits: { deadline: timestampFromDate(new Date(Date.now() + 1_500)) } }),
    );
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.TIMED_OUT);
    assert.equal(exited.errorCode, "deadline_exceeded");
  });

  void it("kills a grandchild the harness left behind", async () => {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "grandchild" }));
    const exited = stream.exited();
    const pid = Number(exited.result?.text);
    assert(pid > 0);
    assert.equal(exited.leftoverProcesses, true);
    // SIGKILL was sent when the harness exited; the kernel may need a moment to carry it out on a busy machine.
    for (let i = 0; i < 100 && processAlive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(processAlive(pid), false);
  });

  void it("reports a command that cannot start as spawn_failed", async () => {
    const stream = await runToEnd(t.client, scenarioStart({}, { command: ["/no/such/harness"] }));
    assert.equal(stream.exited().errorCode, "spawn_failed");
    assert.equal(stream.exited().status, SessionStatus.FAILED);
  });

  const invalid: { name: string; start: Parameters<typeof scenarioStart>; field: string }[] = [
    { name: "missing command", start: [{ mode: "complete" }, { command: [] }], field: "start.command" },
    {
      name: "working dir outside the root",
      start: [{ mode: "complete" }, {}, { workingDir: "/etc/oz0-work" }],
      field: "start.request.working_dir",
    },
    {
      name: "relative working dir",
      start: [{ mode: "complete" }, {}, { workingDir: "work" }],
      field: "start.request.working_dir",
    },
    {
      name: "deadline in the past",
      start: [{ mode: "complete" }, {}, { limits: { deadline: timestampFromDate(new Date(Date.now() - 1000)) } }],
      field: "start.request.limits.deadline",
    },
    {
      name: "bad session id",
      start: [{ mode: "complete" }, {}, { sessionId: "../x" }],
      field: "start.request.session_id",
    },
    {
      name: "attachment escaping the working dir",
      start: [
        { mode: "complete" },
        { attachments: [{ path: "../x", source: { case: "content", value: new Uint8Array() } }] },
      ],
      field: "start.attachments[0].path",
    },
    {
      name: "artifact path escaping",
      start: [{ mode: "complete" }, { artifactPaths: ["/etc/passwd"] }],
      field: "start.artifact_paths[0]",
    },
    {
      name: "missing plugin dir",
      start: [{ mode: "complete" }, { pluginDir: "/no/such/plugin" }],
      field: "start.plugin_dir",
    },
  ];
  for (const c of invalid) {
    void it(`refuses a start with ${c.name} as INVALID_ARGUMENT naming ${c.field}`, async () => {
      const stream = await runToEnd(t.client, scenarioStart(...c.start));
      const error = ConnectError.from(stream.error);
      assert.equal(error.code, Code.InvalidArgument);
      assert(error.rawMessage.startsWith(`${c.field}:`), error.rawMessage);
    });
  }

  void it("refuses a stream whose first message is not start or attach", async () => {
    const stream = new SessionStream(t.client, { message: { case: "cancel", value: {} } });
    await stream.finished;
    assert.equal(ConnectError.from(stream.error).code, Code.InvalidArgument);
  });

  void it("still runs sessions after all of that", async () => {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(stream.exited().status, SessionStatus.COMPLETED);
    assert.equal(
      (await t.client.listSessions({})).sessions.filter((s) => s.status === SessionStatus.RUNNING).length,
      0,
    );
  });
});
