// The SDK → protocol mapping on hand-written SDK messages: the cases the
// scripted model does not produce (whole items, thinking, error subtypes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { StopReason } from "@oz0/harness";
import type { SDKMessage, SDKResultMessage } from "@anthropic-ai/claude-agent-sdk";
import { SdkMessageMapper } from "../src/sdk-message-mapper.js";
import type { EventSink } from "../src/session-port.js";

/** What the mapper wrote, as `{ case, value }` records like the protocol's oneof. */
type Written =
  | { case: "text"; value: { text: string } & Record<string, unknown> }
  | { case: "toolCall" | "toolResult" | "usage"; value: unknown };

function mapper(): { events: Written[]; mapper: SdkMessageMapper } {
  const events: Written[] = [];
  const sink: EventSink = {
    text: (text, options) => void events.push({ case: "text", value: { text, ...options } }),
    toolCall: (call) => void events.push({ case: "toolCall", value: call }),
    toolResult: (result) => void events.push({ case: "toolResult", value: result }),
    usage: (usage) => void events.push({ case: "usage", value: usage }),
  };
  return {
    events,
    mapper: new SdkMessageMapper({ events: sink, displayToolName: (n) => n.replace(/^mcp__oz0__/, "") }),
  };
}

const base = { parent_tool_use_id: null, uuid: "00000000-0000-0000-0000-000000000000", session_id: "s" } as const;

function assistant(id: string, content: unknown[]): SDKMessage {
  return {
    ...base,
    type: "assistant",
    message: {
      id,
      type: "message",
      role: "assistant",
      model: "claude-x",
      content,
      stop_reason: null,
      stop_sequence: null,
      usage: {},
    },
  } as unknown as SDKMessage;
}

function result(fields: Record<string, unknown>): SDKResultMessage {
  return {
    ...base,
    type: "result",
    duration_ms: 1,
    duration_api_ms: 1,
    is_error: false,
    num_turns: 3,
    stop_reason: null,
    total_cost_usd: 0.25,
    usage: {},
    modelUsage: {
      "claude-x": {
        inputTokens: 10,
        outputTokens: 5,
        cacheReadInputTokens: 2,
        cacheCreationInputTokens: 1,
        webSearchRequests: 0,
        costUSD: 0.25,
        contextWindow: 1,
        maxOutputTokens: 1,
      },
    },
    permission_denials: [],
    errors: [],
    ...fields,
  } as unknown as SDKResultMessage;
}

void test("without partial messages, text and thinking arrive as whole items; tool calls are announced once", () => {
  const { events, mapper: m } = mapper();
  m.handle(
    assistant("msg_1", [
      { type: "thinking", thinking: "hmm", signature: "" },
      { type: "text", text: "Hello." },
    ]),
  );
  m.handle(assistant("msg_1", [{ type: "tool_use", id: "toolu_1", name: "mcp__oz0__lookup", input: { key: "k" } }]));
  m.announceToolCall("toolu_1", "mcp__oz0__lookup", { key: "k" });
  assert.deepEqual(events, [
    { case: "text", value: { text: "hmm", itemId: "msg_1/whole-1", delta: false, role: "thinking" } },
    { case: "text", value: { text: "Hello.", itemId: "msg_1/whole-2", delta: false, role: "assistant" } },
    { case: "toolCall", value: { callId: "toolu_1", tool: "lookup", input: { key: "k" }, title: "Use lookup" } },
  ]);
});

void test("streamed text is sent as deltas and not again as a whole item; each model call reports its usage", () => {
  const { events, mapper: m } = mapper();
  const stream = (event: unknown): SDKMessage => ({ ...base, type: "stream_event", event }) as unknown as SDKMessage;
  m.handle(
    stream({
      type: "message_start",
      message: {
        id: "msg_2",
        model: "claude-x",
        usage: { input_tokens: 7, output_tokens: 1, cache_read_input_tokens: 3 },
      },
    }),
  );
  m.handle(stream({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }));
  m.handle(stream({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } }));
  m.handle(stream({ type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "lo." } }));
  m.handle(assistant("msg_2", [{ type: "text", text: "Hello." }]));
  m.handle(stream({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 4 } }));
  m.handle(stream({ type: "message_stop" }));
  assert.deepEqual(events, [
    { case: "text", value: { text: "Hel", itemId: "msg_2/0", delta: true, role: "assistant" } },
    { case: "text", value: { text: "lo.", itemId: "msg_2/0", delta: true, role: "assistant" } },
    {
      case: "usage",
      value: { model: "claude-x", inputTokens: 7, outputTokens: 4, cacheReadTokens: 3, cacheWriteTokens: 0 },
    },
  ]);
});

void test("tool results keep is_error and become text when they are only text; StructuredOutput stays out of the events", () => {
  const { events, mapper: m } = mapper();
  m.announceToolCall("toolu_so", "StructuredOutput", { a: 1 });
  const user = (content: unknown[]): SDKMessage =>
    ({ ...base, type: "user", message: { role: "user", content } }) as unknown as SDKMessage;
  m.handle(
    user([
      {
        type: "tool_result",
        tool_use_id: "toolu_1",
        content: [
          { type: "text", text: "a" },
          { type: "text", text: "b" },
        ],
        is_error: true,
      },
      { type: "tool_result", tool_use_id: "toolu_so", content: "Structured output provided" },
    ]),
  );
  assert.deepEqual(events, [{ case: "toolResult", value: { callId: "toolu_1", output: "a\nb", isError: true } }]);
});

void test("the SDK's result subtypes map to the protocol's stop reasons", () => {
  const { mapper: m } = mapper();
  const success = m.result(result({ subtype: "success", result: "Done.", structured_output: { x: 1 } }));
  assert.equal(success.stopReason, StopReason.COMPLETED);
  assert.equal(success.text, "Done.");
  assert.deepEqual(success.structuredOutput, { x: 1 });
  assert.equal(success.turns, 3);
  assert.deepEqual(success.usage, [
    {
      model: "claude-x",
      inputTokens: 10,
      outputTokens: 5,
      cacheReadTokens: 2,
      cacheWriteTokens: 1,
      reasoningTokens: 0,
      costUsd: 0.25,
    },
  ]);

  const apiError = m.result(result({ subtype: "success", is_error: true, result: "API Error: 401 invalid token" }));
  assert.equal(apiError.stopReason, StopReason.ERROR);
  assert.match(apiError.error ?? "", /401 invalid token/);

  assert.equal(
    m.result(result({ subtype: "error_max_turns", errors: ["Reached maximum number of turns (3)"] })).stopReason,
    StopReason.MAX_TURNS,
  );
  const budget = m.result(result({ subtype: "error_max_budget_usd", errors: [] }));
  assert.equal(budget.stopReason, StopReason.BUDGET_EXHAUSTED);
  assert.match(budget.error ?? "", /max_budget_usd.*\$0\.2500/);
  const failed = m.result(result({ subtype: "error_during_execution", errors: ["boom"] }));
  assert.deepEqual([failed.stopReason, failed.error], [StopReason.ERROR, "boom"]);
  assert.equal(
    m.result(result({ subtype: "error_max_structured_output_retries", errors: ["bad"] })).stopReason,
    StopReason.ERROR,
  );
});
