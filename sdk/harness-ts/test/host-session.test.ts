import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { HostSessionError, processGroupLauncher, startHostSession } from "@oz0/harness/host";
import type { HarnessLauncher, HostSession, HostSessionOptions, SessionOutcome } from "@oz0/harness/host";

const RULE =
  "at most 256 characters, with no control characters, line or paragraph separators, bidirectional controls or half characters";

const harness = fileURLToPath(new URL("./fixtures/host/protocol-harness.mjs", import.meta.url));

function run(
  behaviour: string,
  options: Partial<HostSessionOptions> = {},
): { session: HostSession; events: SessionEvent[] } {
  const events: SessionEvent[] = [];
  const session = startHostSession({
    command: [process.execPath, harness, behaviour],
    cwd: process.cwd(),
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    request: create(SessionRequestSchema, { protocolVersion: 1, sessionId: "s1", jobId: "j1", input: "hello" }),
    graceMs: 2000,
    onEvent: (event) => events.push(event),
    ...options,
  });
  return { session, events };
}

function processGone(pid: number): boolean {
  try {
    // A killed grandchild may linger as a zombie until init reaps it; that is gone too.
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return true;
  }
}

async function expectFailure(outcome: Promise<SessionOutcome>, code: string): Promise<SessionOutcome> {
  const result = await outcome;
  assert.equal(result.status, "failed", `status for ${code}`);
  assert.equal(result.error?.code, code, result.error?.message);
  assert.ok((result.error?.message.length ?? 0) > 10);
  return result;
}

void describe("startHostSession", () => {
  void it("runs a well-behaved harness: events in order, permission and runtime tool answers relayed", async () => {
    const { session, events } = run("well-behaved", {
      onEvent: (event) => {
        events.push(event);
        if (event.event.case === "permissionRequest") {
          session.answerPermission({ id: event.event.value.id, allow: true, reason: "fine" });
        }
        if (event.event.case === "runtimeToolCall") {
          session.sendRuntimeToolResult({
            id: event.event.value.id,
            output: { kind: { case: "stringValue", value: "found" } },
          });
        }
      },
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.equal(outcome.error, undefined);
    assert.equal(outcome.exitCode, 0);
    assert.deepEqual(
      events.map((e) => e.event.case),
      ["started", "text", "permissionRequest", "toolResult", "runtimeToolCall", "usage", "result"],
    );
    assert.equal(outcome.result?.stopReason, StopReason.COMPLETED);
    const echoed = JSON.parse(outcome.result?.text ?? "{}");
    assert.deepEqual(echoed, {
      answer: { id: "p1", allow: true, reason: "fine", outcome: "OUTCOME_ANSWERED" },
      tool: { id: "r1", output: "found" },
    });
    assert.equal(outcome.started?.harnessName, "protocol-harness");
    assert.equal(outcome.counts.events, 7);
    assert.equal(outcome.counts.permissionRequests, 1);
    assert.equal(outcome.counts.runtimeToolCalls, 1);
    assert.equal(outcome.leftoverProcesses, false);
  });

  void it("throws a typed error for unknown and repeated answers without disturbing the session", async () => {
    const errors: string[] = [];
    const { session } = run("well-behaved", {
      onEvent: (event) => {
        if (event.event.case === "permissionRequest") {
          try {
            session.answerPermission({ id: "nope", allow: true });
          } catch (error) {
            assert.ok(error instanceof HostSessionError);
            errors.push(error.code);
          }
          session.answerPermission({ id: "p1", allow: false, reason: "no" });
          try {
            session.answerPermission({ id: "p1", allow: true });
          } catch (error) {
            errors.push((error as HostSessionError).code);
          }
        }
        if (event.event.case === "runtimeToolCall") {
          try {
            session.sendRuntimeToolResult({ id: "other" });
          } catch (error) {
            errors.push((error as HostSessionError).code);
          }
          // A result no JSON line can carry is refused, and the call can still be answered.
          try {
            session.sendRuntimeToolResult({
              id: "r1",
              output: { kind: { case: "numberValue", value: Number.POSITIVE_INFINITY } },
            });
          } catch (error) {
            errors.push((error as Error).message);
          }
          session.sendRuntimeToolResult({ id: "r1", isError: true, error: "broken" });
        }
      },
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.deepEqual(errors.slice(0, 3), [
      "unknown_permission_id",
      "permission_already_answered",
      "unknown_runtime_tool_call_id",
    ]);
    assert.match(errors[3] ?? "", /cannot be NaN or Infinity/);
    assert.equal(errors.length, 4);
    assert.throws(
      () => session.answerPermission({ id: "p1", allow: true }),
      (e: unknown) => (e as HostSessionError).code === "session_ended",
    );
  });

  void it("ignores unknown fields in events", async () => {
    const { session, events } = run("unknown-fields");
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.equal(events.length, 3);
    assert.equal(outcome.result?.text, "done");
  });

  void it("frames lines written a byte at a time, multi-byte characters included", async () => {
    const { session, events } = run("multibyte-chunks");
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    const text = events.find((e) => e.event.case === "text");
    assert.equal(text?.event.case === "text" ? text.event.value.text : undefined, "héllo wörld ✨ 🎉 日本語");
  });

  void it("accepts a final result line without its newline", async () => {
    const outcome = await run("no-trailing-newline").session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.equal(outcome.result?.text, "last");
  });

  void it("says so when the output's last line is cut short: the harness exited mid-line", async () => {
    const outcome = await expectFailure(run("exits-mid-line").session.outcome, "invalid_json");
    assert.equal(
      outcome.error?.message,
      'stdout line 2 is not JSON: "{\\"text\\":{\\"itemId\\":\\"t1\\",\\"te" (26 bytes); it is the output\'s last line and no newline ended it: the harness exited or closed its stdout in the middle of writing it (write each event whole, then flush, before exiting)',
    );
  });

  void it("accepts a lone result as a refusal of the request", async () => {
    const outcome = await run("refuses").session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.equal(outcome.result?.stopReason, StopReason.ERROR);
  });

  void it("fails a lone result that is not a refusal: a session that never started did not complete", async () => {
    const outcome = await expectFailure(run("result-first").session.outcome, "first_event_not_started");
    assert.equal(
      outcome.error?.message,
      "the first event must be started; a result before it is only a refusal of the request's protocol version, with stop_reason STOP_REASON_ERROR (this one has STOP_REASON_COMPLETED)",
    );
  });

  void it("fails a non-JSON line, keeping the events before it", async () => {
    const { session, events } = run("garbage");
    const outcome = await expectFailure(session.outcome, "invalid_json");
    // What to do, too: the usual cause is a print, or a tool's child process writing to the stdout it inherited.
    assert.equal(
      outcome.error?.message,
      'stdout line 2 is not JSON: "this is not json" (16 bytes); stdout carries only events, one JSON object a line: write logs to stderr, and give the processes a tool starts a stdout of their own (captured, or stderr), not the harness\'s',
    );
    assert.deepEqual(
      events.map((e) => e.event.case),
      ["started"],
    );
    assert.equal(outcome.counts.events, 1);
  });

  void it("quotes what a refused line holds inert: no escape sequence or override reaches the failure message", async () => {
    for (const [behaviour, code] of [
      ["hostile-garbage", "invalid_json"],
      ["hostile-invalid-event", "invalid_event"],
      ["hostile-enum-name", "invalid_event"],
    ] as const) {
      const message = (await expectFailure(run(behaviour).session.outcome, code)).error?.message ?? "";
      // eslint-disable-next-line no-control-regex -- the control characters are what it looks for
      assert.doesNotMatch(message, /[\u0000-\u001f\u007f-\u009f\u202a-\u202e]/, `${behaviour}: ${message}`);
      assert.match(message, /\\u202e/, `${behaviour}: ${message}`);
    }
  });

  void it("fails a line over the size limit", async () => {
    const outcome = await expectFailure(run("oversized", { maxLineBytes: 1000 }).session.outcome, "line_too_long");
    assert.match(outcome.error?.message ?? "", /1000 bytes/);
  });

  void it("fails an unknown event kind", async () => {
    await expectFailure(run("unknown-kind").session.outcome, "unknown_event_kind");
  });

  void it("fails a first event that is not started", async () => {
    await expectFailure(run("no-started").session.outcome, "first_event_not_started");
  });

  void it("fails a protocol version it does not speak", async () => {
    await expectFailure(run("wrong-version").session.outcome, "unsupported_protocol_version");
  });

  void it("fails a second result but keeps the first", async () => {
    const outcome = await expectFailure(run("two-results").session.outcome, "duplicate_result");
    assert.equal(outcome.result?.text, "one");
  });

  void it("fails a permission request that reuses an id, or a call id, an earlier request used; the repeat is not delivered", async () => {
    const repeats = {
      "repeats-permission-id": 'the harness reused the permission request id "p1"; ids are unique in a session',
      "repeats-call-id":
        'the harness reused "c1" in permission request "p2": it is the call id of permission request "p1"; a harness asks once per tool call, and ids are unique in a session',
      "call-id-of-another-id":
        'the harness reused "p1" in permission request "p2": it is the id of permission request "p1"; a harness asks once per tool call, and ids are unique in a session',
    };
    for (const [behaviour, message] of Object.entries(repeats)) {
      const { session, events } = run(behaviour);
      const outcome = await expectFailure(session.outcome, "duplicate_request_id");
      assert.equal(outcome.error?.message, message);
      assert.deepEqual(
        events.map((e) => (e.event.case === "permissionRequest" ? e.event.value.id : e.event.case)),
        ["started", "p1"],
        `${behaviour}: the repeat never reaches the caller`,
      );
    }
  });

  void it("fails an id longer than 256 characters, or with a character no id may hold; the request is not delivered", async () => {
    const wrong = {
      "long-permission-id": `the permission request id "${"p".repeat(120)}…" (257 characters) has 257 characters, more than 256`,
      "nul-call-id": 'the call id of permission request "p1" "c\\u0000" has a control character (U+0000) in it',
      "escape-runtime-call-id": 'the runtime tool call id "r\\u001b[2J" has a control character (U+001B) in it',
      "half-emoji-id": 'the permission request id "p\\ud83d" has half of a character (U+D83D, a surrogate alone) in it',
      "c1-control-id": 'the permission request id "p\\u009b" has a control character (U+009B) in it',
      "line-separator-id": 'the permission request id "p\\u2028" has a line separator (U+2028) in it',
      "paragraph-separator-call-id":
        'the call id of permission request "p1" "c\\u2029" has a paragraph separator (U+2029) in it',
      "bidi-override-runtime-call-id": 'the runtime tool call id "r\\u202e" has a bidirectional control (U+202E) in it',
      "bidi-isolate-id": 'the permission request id "p\\u2066" has a bidirectional control (U+2066) in it',
      "bidi-mark-id": 'the permission request id "p\\u200f~/\\u200f" has a bidirectional control (U+200F) in it',
    };
    for (const [behaviour, message] of Object.entries(wrong)) {
      const { session, events } = run(behaviour);
      const outcome = await expectFailure(session.outcome, "invalid_event");
      assert.equal(outcome.error?.message, `${message}; ids are ${RULE}`, behaviour);
      assert.deepEqual(
        events.map((e) => e.event.case),
        ["started"],
        `${behaviour}: the request never reaches the caller`,
      );
    }
  });

  void it("takes requests without a call id, and one whose id is its call id", async () => {
    const { session, events } = run("distinct-ids");
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.equal(events.filter((e) => e.event.case === "permissionRequest").length, 3);
  });

  void it("with permissions on, fails a second tool result for one call: one allowed request covers one run", async () => {
    const permissions = create(SessionRequestSchema, {
      protocolVersion: 1,
      sessionId: "s1",
      jobId: "j1",
      permissions: true,
    });
    const { session, events } = run("repeats-tool-result", {
      request: permissions,
      onEvent: (event) => {
        events.push(event);
        if (event.event.case === "permissionRequest")
          session.answerPermission({ id: event.event.value.id, allow: true });
      },
    });
    const outcome = await expectFailure(session.outcome, "duplicate_request_id");
    assert.equal(
      outcome.error?.message,
      'the harness wrote a second tool result for call "c1"; a tool call has one result, and with permissions on each run of a tool is asked about under a call id of its own',
    );
    assert.deepEqual(
      events.map((e) => e.event.case),
      ["started", "toolCall", "permissionRequest", "toolResult", "toolCall"],
      "the second result never reaches the caller",
    );
    // Without permissions nothing relies on one result a call, so a harness's own use of call ids stands.
    const unasked = run("repeats-tool-result", {
      onEvent: (event) => {
        if (event.event.case === "permissionRequest")
          unasked.session.answerPermission({ id: event.event.value.id, allow: true });
      },
    });
    assert.equal((await unasked.session.outcome).status, "completed");
  });

  void it("fails a cost that is not a finite number of 0 or more, in a usage event or the result", async () => {
    const nan = await expectFailure(run("nan-cost").session.outcome, "invalid_event");
    assert.equal(
      nan.error?.message,
      'a usage event reports a cost of NaN US dollars for "m"; costUsd is a finite number of 0 or more (leave it 0 when the cost is unknown)',
    );
    const negative = await expectFailure(run("negative-cost-in-result").session.outcome, "invalid_event");
    assert.match(negative.error?.message ?? "", /^the result's usage reports a cost of -1000000 US dollars for "m"/);
    assert.equal(negative.result, undefined, "the result is not taken");
  });

  void it("fails events after the result", async () => {
    const outcome = await expectFailure(run("event-after-result").session.outcome, "event_after_result");
    assert.equal(outcome.result?.text, "one");
  });

  void it("fails an exit without a result, with the exit code", async () => {
    const outcome = await expectFailure(run("no-result").session.outcome, "no_result");
    assert.equal(outcome.exitCode, 3);
    assert.match(outcome.error?.message ?? "", /code 3/);
  });

  void it("fails a harness killed by a signal without a result", async () => {
    const outcome = await expectFailure(run("exit-signal").session.outcome, "no_result");
    assert.equal(outcome.signal, "SIGKILL");
  });

  void it("stops a harness that lingers after its result", async () => {
    const outcome = await expectFailure(run("result-then-linger", { graceMs: 300 }).session.outcome, "did_not_exit");
    assert.equal(outcome.result?.text, "done");
  });

  void it("kills a grandchild left in the group when the harness exits", async () => {
    const { session, events } = run("forks-grandchild");
    const outcome = await expectFailure(session.outcome, "no_result");
    const text = events.find((e) => e.event.case === "text");
    const pid = Number(text?.event.case === "text" ? text.event.value.text : NaN);
    assert.ok(pid > 0);
    assert.equal(outcome.leftoverProcesses, true);
    // SIGKILLed when the harness exited. The kernel closes a dying process's files (the pipe that let the
    // outcome resolve) a moment before it shows as a zombie, so look again briefly rather than once.
    for (let tries = 0; !processGone(pid) && tries < 100; tries++) await new Promise((r) => setTimeout(r, 50));
    assert.ok(processGone(pid), `grandchild ${pid} still running 5 s after the harness exited`);
  });

  void it("cancels: answers pending permissions OUTCOME_CANCELLED, then SIGTERM, and records the cancelled result", async () => {
    const { session, events } = run("cancellable", {
      onEvent: (event) => {
        events.push(event);
        if (event.event.case === "permissionRequest") session.cancel("user pressed stop");
      },
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "cancelled");
    assert.equal(outcome.error, undefined, outcome.error?.message);
    assert.equal(outcome.cancelReason, "user pressed stop");
    assert.equal(outcome.result?.stopReason, StopReason.CANCELLED);
    const texts = events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : []));
    assert.deepEqual(texts, ["answer: OUTCOME_CANCELLED allow=false"]);
  });

  void it("kills a harness that ignores SIGTERM after the grace", async () => {
    const { session } = run("ignores-sigterm", {
      graceMs: 300,
      onEvent: (event) => {
        if (event.event.case === "started") session.cancel();
      },
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "cancelled");
    assert.equal(outcome.error?.code, "ignored_sigterm");
    assert.equal(outcome.signal, "SIGKILL");
  });

  void it("kill() ends a harness that ignores SIGTERM at once, with no grace, and cuts a cancel's grace short", async () => {
    // A grace of ten minutes: a SIGTERM and its grace would hold this test to its timeout.
    for (const cancelFirst of [false, true]) {
      const { session } = run("ignores-sigterm", {
        graceMs: 600_000,
        onEvent: (event) => {
          if (event.event.case !== "started") return;
          if (cancelFirst) session.cancel("stop");
          session.kill("flooded the disk");
        },
      });
      const outcome = await session.outcome;
      assert.equal(outcome.status, "cancelled");
      assert.equal(outcome.signal, "SIGKILL");
      assert.equal(outcome.error, undefined, "it never waited out a grace (no ignored_sigterm)");
      assert.equal(outcome.cancelReason, cancelFirst ? "stop" : "flooded the disk");
    }
  });

  void it("times out at the deadline: pending permissions get OUTCOME_TIMED_OUT", async () => {
    const { session, events } = run("cancellable", { deadline: new Date(Date.now() + 300) });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "timed_out");
    assert.equal(outcome.error?.code, "deadline_exceeded");
    assert.equal(outcome.result?.stopReason, StopReason.CANCELLED);
    const texts = events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : []));
    assert.deepEqual(texts, ["answer: OUTCOME_TIMED_OUT allow=false"]);
  });

  void it("reports a command that cannot start", async () => {
    const session = startHostSession({
      command: ["/nonexistent/harness"],
      cwd: process.cwd(),
      env: {},
      request: create(SessionRequestSchema, {}),
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "failed");
    assert.equal(outcome.error?.code, "spawn_failed");
    assert.equal(session.pid, undefined);
  });

  void it("stops the session when onEvent throws", async () => {
    const { session } = run("cancellable", {
      onEvent: () => {
        throw new Error("sink broke");
      },
    });
    const outcome = await expectFailure(session.outcome, "event_callback_failed");
    assert.match(outcome.error?.message ?? "", /sink broke/);
  });

  // A guard, not a measure: before, such a session ran on until its deadline.
  void it(
    "stops a harness whose stdout cannot be read, rather than leave it running unheard",
    { timeout: 60_000 },
    async () => {
      // A kept session's stdout is a file the sandbox reads, whose open fails when the node is out of descriptors: the
      // reader errs while the harness, whose output goes to the file, runs on (a closed pipe would end it instead).
      const processes = processGroupLauncher();
      const launcher: HarnessLauncher = {
        launch(spec) {
          const launched = processes.launch(spec);
          const unopened = Object.assign(new Error("EMFILE: too many open files, open 'stdout'"), { code: "EMFILE" });
          setImmediate(() => launched.child.stdout.emit("error", unopened));
          return launched;
        },
      };
      const { session } = run("cancellable", { launcher });
      const outcome = await expectFailure(session.outcome, "output_unreadable");
      assert.match(outcome.error?.message ?? "", /EMFILE/);
    },
  );

  void it("kills the harness's process group when the host process exits", async () => {
    const { execFile } = await import("node:child_process");
    const pid = await new Promise<number>((resolve, reject) =>
      execFile(
        process.execPath,
        [fileURLToPath(new URL("./fixtures/host/exiting-host.mjs", import.meta.url))],
        (error, stdout) => (error ? reject(error) : resolve(Number(stdout.trim()))),
      ),
    );
    assert.ok(pid > 0);
    // SIGKILL was sent synchronously in the host's exit handler; the kernel ends the process a moment
    // later (on a loaded machine the check raced it), so it is given a bounded while to be gone.
    for (let i = 0; i < 100 && !processGone(pid); i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.ok(processGone(pid), `harness ${pid} outlived its host`);
  });

  void it("does not inherit the host environment", async () => {
    process.env.OZ0_HOST_SECRET_FOR_TEST = "leak";
    const { session } = startEnvProbe();
    const outcome = await session.outcome;
    delete process.env.OZ0_HOST_SECRET_FOR_TEST;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.deepEqual(JSON.parse(outcome.result?.text ?? ""), { secret: null, given: "yes" });
  });
});

function startEnvProbe(): { session: HostSession } {
  const script = `
    process.stdin.once("data", () => {
      const w = (e) => process.stdout.write(JSON.stringify(e) + "\\n");
      w({ started: { protocolVersion: "PROTOCOL_VERSION_1" } });
      w({ result: { stopReason: "STOP_REASON_COMPLETED", text: JSON.stringify({ secret: process.env.OZ0_HOST_SECRET_FOR_TEST ?? null, given: process.env.GIVEN }) } });
    });`;
  const session = startHostSession({
    command: [process.execPath, "-e", script],
    cwd: process.cwd(),
    env: { GIVEN: "yes" },
    request: create(SessionRequestSchema, {}),
  });
  return { session };
}
