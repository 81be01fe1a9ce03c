// session/update → protocol events, with a recording sink instead of a session.
import { test } from "node:test";
import type { TestContext } from "node:test";
import assert from "node:assert/strict";
import { AcpSessionError } from "../src/acp-errors.js";
import { ANNOUNCEMENT_GRACE_MS, SessionUpdateMapper, globBase } from "../src/session-update-mapper.js";
import type { EventSink } from "../src/session-update-mapper.js";

function recorder(): { sink: EventSink; events: Array<[string, unknown]> } {
  const events: Array<[string, unknown]> = [];
  const sink: EventSink = {
    text: (text, options) => void events.push(["text", { text, ...options }]),
    toolCall: (call) => void events.push(["toolCall", call]),
    toolResult: (result) => void events.push(["toolResult", result]),
    usage: (usage) => void events.push(["usage", usage]),
    log: () => {},
  };
  return { sink, events };
}

const update = (body: Record<string, unknown>): unknown => ({ sessionId: "s", update: body });
/** A permission request's call, the session never cancelled. */
const live = new AbortController().signal;
async function permitted(mapper: SessionUpdateMapper, toolCall: Record<string, unknown>) {
  const tracked = await mapper.toolCallForPermission(toolCall, live);
  assert.ok(tracked !== undefined);
  return tracked;
}
const chunk = (text: string, kind = "agent_message_chunk"): unknown =>
  update({ sessionUpdate: kind, content: { type: "text", text } });

void test("message chunks are deltas of one item until something else comes; the last item is the final text", async () => {
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(chunk("Let me "));
  mapper.apply(chunk("look."));
  mapper.apply(chunk("Hmm", "agent_thought_chunk"));
  mapper.apply(
    update({
      sessionUpdate: "tool_call",
      toolCallId: "t1",
      title: "ls",
      kind: "execute",
      status: "pending",
      rawInput: {},
    }),
  );
  mapper.apply(chunk("Done."));
  assert.deepEqual(
    events.filter(([kind]) => kind === "text").map(([, e]) => e),
    [
      { text: "Let me ", itemId: "item-1", delta: true, role: "assistant" },
      { text: "look.", itemId: "item-1", delta: true, role: "assistant" },
      { text: "Hmm", itemId: "item-2", delta: true, role: "thinking" },
      { text: "Done.", itemId: "item-3", delta: true, role: "assistant" },
    ],
  );
  assert.equal(mapper.finalText, "Done.");
});

void test("a tool call is announced once its input is known, and finished once with status, kind, title and diff paths", async () => {
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  // Streamed agents announce before the input is known.
  mapper.apply(
    update({
      sessionUpdate: "tool_call",
      toolCallId: "t1",
      title: "Edit",
      kind: "edit",
      status: "pending",
      rawInput: {},
      _meta: { claudeCode: { toolName: "Edit" } },
    }),
  );
  assert.deepEqual(events, []);
  mapper.apply(
    update({
      sessionUpdate: "tool_call_update",
      toolCallId: "t1",
      title: "Edit a.ts",
      rawInput: { file_path: "/w/a.ts" },
    }),
  );
  // The permission bridge records the runtime's allow.
  (await permitted(mapper, { toolCallId: "t1" })).permission = "allowed";
  mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "in_progress" }));
  mapper.apply(
    update({
      sessionUpdate: "tool_call_update",
      toolCallId: "t1",
      status: "completed",
      content: [
        { type: "diff", path: "/w/a.ts", oldText: "a", newText: "b" },
        { type: "diff", path: "/w/b.ts", newText: "c" },
      ],
    }),
  );
  mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" }));
  assert.deepEqual(events, [
    ["toolCall", { callId: "t1", tool: "Edit", input: { file_path: "/w/a.ts" }, title: "Edit a.ts" }],
    [
      "toolResult",
      {
        callId: "t1",
        output: { status: "completed", kind: "edit", title: "Edit a.ts", files: ["/w/a.ts", "/w/b.ts"] },
        isError: false,
      },
    ],
  ]);
});

void test("a permission request for an announced tool call announces it at once", async () => {
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(update({ sessionUpdate: "tool_call", toolCallId: "t2", title: "Run", kind: "execute" }));
  const tracked = await permitted(mapper, { toolCallId: "t2", rawInput: { command: "ls" } });
  assert.equal(tracked.kind, "execute");
  assert.deepEqual(events, [["toolCall", { callId: "t2", tool: "execute", input: { command: "ls" }, title: "Run" }]]);
});

void test("a permission request that overtakes its call's tool_call waits for it and names the tool as the update does", async () => {
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  // claude-agent-acp under load: the request first, then the content_block_start update (input still `{}`).
  const request = mapper.toolCallForPermission(
    { toolCallId: "t3", title: "ls", kind: "execute", rawInput: { command: "ls" } },
    live,
  );
  await new Promise((resolve) => setImmediate(resolve));
  assert.deepEqual(events, [], "nothing is announced before the agent's tool_call");
  mapper.apply(
    update({
      sessionUpdate: "tool_call",
      toolCallId: "t3",
      kind: "execute",
      status: "pending",
      rawInput: {},
      _meta: { claudeCode: { toolName: "Bash" } },
    }),
  );
  const tracked = await request;
  // The tool's own name (what policies match on), not the kind the request alone would give.
  assert.equal(tracked?.tool, "Bash");
  assert.deepEqual(events, [["toolCall", { callId: "t3", tool: "Bash", input: { command: "ls" }, title: "ls" }]]);
});

void test("a permission request for a call never announced ends the session after the grace; a cancel ends the wait", async (t: TestContext) => {
  t.mock.timers.enable({ apis: ["setTimeout"] });
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  const ghost = mapper.toolCallForPermission({ toolCallId: "ghost", title: "rm -rf /" }, live);
  t.mock.timers.tick(ANNOUNCEMENT_GRACE_MS - 1);
  await new Promise((resolve) => setImmediate(resolve));
  mapper.apply(update({ sessionUpdate: "tool_call", toolCallId: "other", kind: "read", rawInput: { path: "a" } }));
  t.mock.timers.tick(1);
  await assert.rejects(ghost, (e: unknown) => e instanceof AcpSessionError && e.code === "unannounced_tool_call");

  const cancel = new AbortController();
  const cancelled = mapper.toolCallForPermission({ toolCallId: "ghost-2" }, cancel.signal);
  cancel.abort();
  assert.equal(await cancelled, undefined);
  assert.deepEqual(
    events.map(([kind]) => kind),
    ["toolCall"],
  );
});

void test("plans are whole text items (not the final text); usage updates report cost deltas; prompt usage reports tokens", () => {
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(chunk("Answer."));
  mapper.apply(
    update({
      sessionUpdate: "plan",
      entries: [
        { content: "Read", priority: "high", status: "completed" },
        { content: "Fix", priority: "high", status: "pending" },
      ],
    }),
  );
  mapper.apply(update({ sessionUpdate: "usage_update", used: 10, size: 100, cost: { amount: 0.5, currency: "USD" } }));
  mapper.apply(update({ sessionUpdate: "usage_update", used: 20, size: 100, cost: { amount: 0.75, currency: "USD" } }));
  mapper.promptUsage({ inputTokens: 7, outputTokens: 3, cachedReadTokens: 2, thoughtTokens: 1, totalTokens: 13 });
  assert.equal(mapper.finalText, "Answer.");
  assert.deepEqual(events.slice(1), [
    ["text", { text: "Plan:\n- [x] Read\n- [ ] Fix", itemId: "plan-2" }],
    ["usage", { model: "m", costUsd: 0.5 }],
    ["usage", { model: "m", costUsd: 0.25 }],
    [
      "usage",
      { model: "m", inputTokens: 7, outputTokens: 3, cacheReadTokens: 2, cacheWriteTokens: 0, reasoningTokens: 1 },
    ],
  ]);
});

void test("an unknown update kind ends the session; extension kinds and known no-op kinds do not", () => {
  const { sink } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(update({ sessionUpdate: "_vendor_progress", x: 1 }));
  mapper.apply(update({ sessionUpdate: "available_commands_update", availableCommands: [] }));
  assert.throws(
    () => mapper.apply(update({ sessionUpdate: "telepathy" })),
    (e: unknown) => e instanceof AcpSessionError && e.code === "unknown_update" && /"telepathy"/.test(e.message),
  );
  assert.throws(
    () => mapper.apply({ sessionId: "s" }),
    (e: unknown) => e instanceof AcpSessionError && e.code === "invalid_message",
  );
});

void test("fail closed: a call reported in_progress or completed without the runtime's allow ends the session, nothing is reported for it", async () => {
  for (const [status, permission, words] of [
    ["completed", "none", "without asking permission"],
    ["in_progress", "none", "without asking permission"],
    ["completed", "refused", "without being allowed"],
  ] as const) {
    const { sink, events } = recorder();
    const mapper = new SessionUpdateMapper({ sink, model: "m" });
    mapper.apply(
      update({ sessionUpdate: "tool_call", toolCallId: "t1", title: "Read", kind: "read", status: "pending" }),
    );
    if (permission === "refused") (await permitted(mapper, { toolCallId: "t1" })).permission = "refused";
    const before = events.length;
    assert.throws(
      () => mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status, rawOutput: "x" })),
      (e: unknown) =>
        e instanceof AcpSessionError &&
        e.code === "unpermitted_tool_call" &&
        e.message ===
          `the agent reported tool call "t1" (read) as ${status} ${words} for it; this harness lets no tool call run unless the runtime allowed it: run the agent in a mode that asks before every tool call`,
    );
    assert.deepEqual(events.slice(before), []);
  }
  // Failing without asking is a failed call, not a run (Claude Code checks the input before it asks).
  const { sink, events } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(
    update({
      sessionUpdate: "tool_call",
      toolCallId: "t2",
      kind: "edit",
      status: "pending",
      rawInput: { file_path: "a" },
    }),
  );
  mapper.apply(
    update({ sessionUpdate: "tool_call_update", toolCallId: "t2", status: "failed", rawOutput: "not read yet" }),
  );
  assert.deepEqual(events.at(-1), [
    "toolResult",
    { callId: "t2", output: { status: "failed", kind: "edit", output: "not read yet" }, isError: true },
  ]);
  // A status that is none of ACP's cannot be told apart from a run: the session ends.
  assert.throws(
    () => mapper.apply(update({ sessionUpdate: "tool_call", toolCallId: "t3", kind: "execute", status: "done" })),
    (e: unknown) =>
      e instanceof AcpSessionError &&
      e.code === "invalid_message" &&
      /status "done", which is none of ACP's \(pending, in_progress, completed, failed\)/.test(e.message),
  );
});

void test("modes: reported before the session's mode is settled, then any switch away from it ends the session", () => {
  const { sink } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(update({ sessionUpdate: "current_mode_update", currentModeId: "acceptEdits" }));
  assert.equal(mapper.reportedMode, "acceptEdits");
  mapper.settleMode("default");
  mapper.apply(update({ sessionUpdate: "current_mode_update", currentModeId: "default" }));
  mapper.apply(
    update({
      sessionUpdate: "config_option_update",
      configOptions: [{ id: "mode", category: "mode", currentValue: "default" }],
    }),
  );
  for (const body of [
    { sessionUpdate: "current_mode_update", currentModeId: "bypassPermissions" },
    { sessionUpdate: "current_mode_update", currentModeId: "plan" },
    {
      sessionUpdate: "config_option_update",
      configOptions: [{ id: "mode", category: "mode", currentValue: "acceptEdits" }],
    },
  ]) {
    assert.throws(
      () => mapper.apply(update(body)),
      (e: unknown) => e instanceof AcpSessionError && e.code === "permission_mode" && /from "default"/.test(e.message),
    );
  }
  // An agent without modes may not start reporting one.
  const none = new SessionUpdateMapper({ sink, model: "m" });
  none.settleMode(undefined);
  assert.throws(
    () => none.apply(update({ sessionUpdate: "current_mode_update", currentModeId: "yolo" })),
    (e: unknown) => e instanceof AcpSessionError && e.code === "permission_mode",
  );
});

void test("an absolute or climbing Glob pattern counts as the path it looks in", () => {
  assert.equal(globBase("/etc/host*"), "/etc");
  assert.equal(globBase("../**/*.ts"), "..");
  assert.equal(globBase("~/.ssh/*"), "~/.ssh");
  assert.equal(globBase("/*"), "/");
  assert.equal(globBase("src/**/*.ts"), "");
  const { sink } = recorder();
  const mapper = new SessionUpdateMapper({ sink, model: "m" });
  mapper.apply(
    update({
      sessionUpdate: "tool_call",
      toolCallId: "g",
      kind: "search",
      rawInput: { pattern: "../*", path: "/w/sub" },
      _meta: { claudeCode: { toolName: "Glob" } },
    }),
  );
  assert.deepEqual(mapper.toolCall("g")?.paths, ["/w/sub", "/w/sub/.."]);
});

void test("a finished call's id announced again or set running again ends the session: it would run under the first call's allow", async () => {
  const finishedAllowedCall = async (): Promise<{ mapper: SessionUpdateMapper; events: Array<[string, unknown]> }> => {
    const { sink, events } = recorder();
    const mapper = new SessionUpdateMapper({ sink, model: "m" });
    mapper.apply(
      update({ sessionUpdate: "tool_call", toolCallId: "t1", kind: "execute", rawInput: { command: "ls" } }),
    );
    (await permitted(mapper, { toolCallId: "t1" })).permission = "allowed";
    mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" }));
    // Updates that do not set it going again are fine (claude-agent-acp's hook updates carry no status).
    mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", content: [] }));
    mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "completed" }));
    mapper.apply(update({ sessionUpdate: "tool_call_update", toolCallId: "t1", status: "failed" }));
    return { mapper, events };
  };
  for (const [body, words] of [
    [
      { sessionUpdate: "tool_call", toolCallId: "t1", kind: "execute", rawInput: { command: "rm -rf build" } },
      'announced tool call "t1" again',
    ],
    [
      { sessionUpdate: "tool_call_update", toolCallId: "t1", status: "in_progress" },
      'reported tool call "t1" as in_progress',
    ],
  ] as const) {
    const { mapper, events } = await finishedAllowedCall();
    const before = events.length;
    assert.throws(
      () => mapper.apply(update(body)),
      (e: unknown) =>
        e instanceof AcpSessionError &&
        e.code === "invalid_message" &&
        e.message.startsWith(`the agent ${words} after it finished (failed); tool call ids must be unique`),
    );
    assert.deepEqual(events.slice(before), []);
  }
});
