import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { PassThrough } from "node:stream";
import { describe, it } from "node:test";
import { create, toJsonString } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { HarnessSessionError, openSession, PermissionAnswer_Outcome, StopReason } from "@oz0/harness";
import type { HarnessSession, OpenSessionOptions } from "@oz0/harness";
import { startHostSession } from "@oz0/harness/host";

interface Pipe {
  input: PassThrough;
  output: PassThrough;
  /** Every JSON line the harness wrote so far. */
  written: () => Array<Record<string, unknown>>;
  /** Resolves with the next line the harness writes. */
  nextEvent: () => Promise<Record<string, unknown>>;
}

function pipe(): Pipe {
  const input = new PassThrough();
  const output = new PassThrough();
  const lines: Array<Record<string, unknown>> = [];
  const waiting: Array<(line: Record<string, unknown>) => void> = [];
  let buffer = "";
  let read = 0;
  output.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    let newline;
    while ((newline = buffer.indexOf("\n")) !== -1) {
      lines.push(JSON.parse(buffer.slice(0, newline)) as Record<string, unknown>);
      buffer = buffer.slice(newline + 1);
      while (waiting.length > 0 && read < lines.length) waiting.shift()?.(lines[read++] as Record<string, unknown>);
    }
  });
  return {
    input,
    output,
    written: () => lines,
    nextEvent: () =>
      read < lines.length
        ? Promise.resolve(lines[read++] as Record<string, unknown>)
        : new Promise((resolve) => waiting.push(resolve)),
  };
}

const request = create(SessionRequestSchema, {
  protocolVersion: 1,
  sessionId: "s-1",
  jobId: "job-7",
  agent: { name: "coder", version: 4 },
  model: { primary: "anthropic/claude-sonnet-5-5", fallbacks: ["openai/gpt-9"] },
  input: "fix it",
  permissions: true,
  llm: {
    anthropicBaseUrl: "http://proxy.local/anthropic/",
    openaiBaseUrl: "http://proxy.local/openai/v1",
    token: "oz0st_token",
    headers: { "Oz0-Job": "job-7", "Oz0-Agent": "coder@4" },
  },
  trace: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "vendor=1" },
});

async function open(
  p: Pipe,
  line = toJsonString(SessionRequestSchema, request),
  options: Partial<OpenSessionOptions> = {},
): Promise<HarnessSession> {
  p.input.write(line + "\n");
  return openSession({
    name: "test-harness",
    version: "9.9",
    capabilities: { permissions: true },
    input: p.input,
    output: p.output,
    log: new PassThrough(),
    handleSigterm: false,
    ...options,
  });
}

void describe("openSession (harness side)", () => {
  void it("reads the request, writes started, and exposes the model endpoint and trace", async () => {
    const p = pipe();
    const session = await open(p);
    assert.deepEqual(await p.nextEvent(), {
      started: {
        protocolVersion: "PROTOCOL_VERSION_1",
        harnessName: "test-harness",
        harnessVersion: "9.9",
        capabilities: { permissions: true },
      },
    });
    assert.equal(session.request.jobId, "job-7");
    assert.equal(session.model.anthropicBaseUrl, "http://proxy.local/anthropic");
    assert.equal(session.model.apiKey, "oz0st_token");
    assert.equal(session.model.model, "claude-sonnet-5-5");
    assert.equal(session.model.provider, "anthropic");
    // Model calls carry the session's trace context, so the LLM proxy's span continues it.
    const trace = { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", tracestate: "vendor=1" };
    assert.deepEqual(session.model.headers, {
      "Oz0-Job": "job-7",
      "Oz0-Agent": "coder@4",
      ...trace,
      "x-api-key": "oz0st_token",
      authorization: "Bearer oz0st_token",
    });
    assert.equal(session.trace.traceparent, trace.traceparent);
    assert.deepEqual(session.trace.carrier, trace);
    // The session's tracer parents a span on the session's span when none is active. With no SDK
    // registered the API's tracer hands back the parent's context, which is what is checked here.
    const span = session.tracer().startSpan("step");
    assert.equal(span.spanContext().traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.equal(span.spanContext().spanId, "b7ad6b7169203331");
    span.end();
    session.result({ text: "ok" });
  });

  void it("falls back to TRACEPARENT from the environment and adds missing Oz0 headers", async () => {
    const p = pipe();
    const bare = create(SessionRequestSchema, { protocolVersion: 1, jobId: "job-8", agent: { name: "a", version: 1 } });
    const traceparent = "00-11111111111111111111111111111111-2222222222222222-01";
    const session = await open(p, toJsonString(SessionRequestSchema, bare), { env: { TRACEPARENT: traceparent } });
    assert.equal(session.trace.traceparent, traceparent);
    assert.equal(session.model.headers["Oz0-Job"], "job-8");
    assert.equal(session.model.headers["Oz0-Agent"], "a");
    session.result();
  });

  void it("writes typed events and exactly one result, with usage totals; a second result throws", async () => {
    const p = pipe();
    const session = await open(p);
    session.turns = 2;
    session.text("hel", { itemId: "i1", delta: true });
    session.toolCall({ callId: "c1", tool: "read_file", input: { path: "a" }, title: "Read a" });
    session.toolResult({ callId: "c1", output: { lines: 3 } });
    session.usage({ model: "m", inputTokens: 10, outputTokens: 2 });
    session.usage({ model: "m", inputTokens: 5, outputTokens: 1, costUsd: 0.5 });
    session.heartbeat();
    session.result({ text: "done", structuredOutput: { ok: true } });
    assert.throws(
      () => session.result(),
      (e: unknown) => e instanceof HarnessSessionError && e.code === "result_already_sent",
    );
    assert.throws(
      () => session.text("late"),
      (e: unknown) => (e as HarnessSessionError).code === "result_already_sent",
    );
    const events = p.written().slice(1);
    assert.deepEqual(
      events.map((e) => Object.keys(e)[0]),
      ["text", "toolCall", "toolResult", "usage", "usage", "heartbeat", "result"],
    );
    assert.deepEqual(events[0], { text: { itemId: "i1", text: "hel", delta: true } });
    assert.deepEqual(events[2], { toolResult: { callId: "c1", output: { lines: 3 } } });
    assert.deepEqual(events[6], {
      result: {
        stopReason: "STOP_REASON_COMPLETED",
        text: "done",
        structuredOutput: { ok: true },
        turns: 2,
        usage: [{ model: "m", inputTokens: "15", outputTokens: "3", costUsd: 0.5 }],
      },
    });
  });

  void it("asks permission and returns the answer, with the replacement input; unanswered outcomes deny", async () => {
    const p = pipe();
    const session = await open(p);
    await p.nextEvent();
    const decision = session.requestPermission({
      tool: "write_file",
      input: { path: "a" },
      title: "Write a",
      callId: "c1",
    });
    const asked = (await p.nextEvent()).permissionRequest as { id: string };
    assert.deepEqual(asked, { id: asked.id, tool: "write_file", input: { path: "a" }, title: "Write a", callId: "c1" });
    p.input.write(JSON.stringify({ permissionAnswer: { id: "someone-else", allow: true } }) + "\n");
    p.input.write(
      JSON.stringify({
        permissionAnswer: { id: asked.id, allow: true, input: { path: "b" }, outcome: "OUTCOME_ANSWERED", future: 1 },
      }) + "\n",
    );
    assert.deepEqual(await decision, {
      allow: true,
      input: { path: "b" },
      reason: "",
      outcome: PermissionAnswer_Outcome.ANSWERED,
      asked: true,
    });

    const second = session.requestPermission({ tool: "run_command", input: { command: "ls" } });
    const id = ((await p.nextEvent()).permissionRequest as { id: string }).id;
    p.input.write(
      JSON.stringify({
        permissionAnswer: { id, allow: true, outcome: "OUTCOME_TIMED_OUT", reason: "nobody answered" },
      }) + "\n",
    );
    const timedOut = await second;
    assert.equal(timedOut.allow, false);
    assert.equal(timedOut.outcome, PermissionAnswer_Outcome.TIMED_OUT);
    assert.deepEqual(timedOut.input, { command: "ls" });
    session.result();
  });

  void it("allows without asking when the request has permissions off", async () => {
    const p = pipe();
    const off = create(SessionRequestSchema, { ...request, permissions: false });
    const session = await open(p, toJsonString(SessionRequestSchema, off));
    const decision = await session.requestPermission({ tool: "x", input: { a: 1 } });
    assert.deepEqual(decision, {
      allow: true,
      input: { a: 1 },
      reason: "",
      outcome: PermissionAnswer_Outcome.UNSPECIFIED,
      asked: false,
    });
    assert.equal(p.written().length, 1);
    session.result();
  });

  void it("calls runtime tools", async () => {
    const p = pipe();
    const session = await open(p);
    await p.nextEvent();
    const call = session.callRuntimeTool("lookup", { key: "k" });
    const sent = (await p.nextEvent()).runtimeToolCall as { id: string; name: string; input: unknown };
    assert.equal(sent.name, "lookup");
    assert.deepEqual(sent.input, { key: "k" });
    p.input.write(JSON.stringify({ runtimeToolResult: { id: sent.id, output: [1, "two"] } }) + "\n");
    assert.deepEqual(await call, { output: [1, "two"], isError: false, error: "" });
    const failing = session.callRuntimeTool("lookup");
    const id = ((await p.nextEvent()).runtimeToolCall as { id: string }).id;
    p.input.write(JSON.stringify({ runtimeToolResult: { id, isError: true, error: "no such key" } }) + "\n");
    assert.deepEqual(await failing, { output: undefined, isError: true, error: "no such key" });
    session.result();
  });

  void it("cancel() aborts the signal, runs hooks, rejects waits and writes one cancelled result", async () => {
    const p = pipe();
    const session = await open(p);
    let hookRan = false;
    session.onCancel(() => (hookRan = true));
    const waiting = session.requestPermission({ tool: "t" });
    session.cancel("stop now");
    await assert.rejects(waiting, (e: unknown) => e instanceof HarnessSessionError && e.code === "cancelled");
    assert.ok(session.signal.aborted);
    assert.ok(hookRan);
    session.cancel();
    const results = p.written().filter((e) => "result" in e);
    assert.deepEqual(results, [{ result: { stopReason: "STOP_REASON_CANCELLED", error: "stop now" } }]);
  });

  void it("answers an invalid request or another protocol version with an error result", async () => {
    const bad = pipe();
    await assert.rejects(open(bad, "{not json"), (e: unknown) => (e as HarnessSessionError).code === "invalid_request");
    assert.equal((bad.written()[0]?.result as { stopReason: string }).stopReason, "STOP_REASON_ERROR");

    const future = pipe();
    await assert.rejects(
      open(future, JSON.stringify({ protocolVersion: 2 })),
      (e: unknown) => (e as HarnessSessionError).code === "unsupported_protocol_version",
    );
    assert.match((future.written()[0]?.result as { error: string }).error, /PROTOCOL_VERSION_1/);

    const empty = pipe();
    empty.input.end();
    await assert.rejects(
      openSession({
        name: "h",
        version: "1",
        input: empty.input,
        output: empty.output,
        handleSigterm: false,
        log: new PassThrough(),
      }),
      (e: unknown) => (e as HarnessSessionError).code === "no_request",
    );
  });

  void it("runHarness turns a thrown error into an error result and exit code 1", async () => {
    const events: string[] = [];
    const session = startHostSession({
      command: [process.execPath, fileURLToPath(new URL("./fixtures/sdk/throwing-harness.mjs", import.meta.url))],
      cwd: process.cwd(),
      env: { PATH: process.env.PATH ?? "" },
      request: create(SessionRequestSchema, { protocolVersion: 1 }),
      onEvent: (event) => events.push(event.event.case ?? "?"),
    });
    const outcome = await session.outcome;
    assert.equal(outcome.status, "completed", outcome.error?.message);
    assert.deepEqual(events, ["started", "text", "result"]);
    assert.equal(outcome.result?.stopReason, StopReason.ERROR);
    assert.equal(outcome.result?.error, "the tool exploded");
    assert.equal(outcome.exitCode, 1);
  });
});
