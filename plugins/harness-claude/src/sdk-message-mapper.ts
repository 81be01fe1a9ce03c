// Turns the Claude Agent SDK's messages into harness protocol events, and its
// final `result` message into the session's result.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { proxyRefusal, StopReason, type ResultInit } from "@oz0/harness";
import type { SDKMessage, SDKResultMessage } from "@anthropic-ai/claude-agent-sdk";
import type { EventSink } from "./session-port.js";
import type { SessionSpans } from "./session-spans.js";
import { STRUCTURED_OUTPUT_TOOL } from "./permission-gate.js";
import { toolTitle } from "./tool-titles.js";

export interface SdkMessageMapperOptions {
  events: EventSink;
  /** Model-facing tool names of the runtime tools mapped back to the runtime's names. */
  displayToolName(sdkName: string): string;
  /** Where the model calls and tool calls become spans of the job's trace. */
  spans?: SessionSpans;
}

interface StreamedItem {
  itemId: string;
  role: "assistant" | "thinking";
  text: string;
}

interface CallUsage {
  model: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

function asObject(value: unknown): JsonObject {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? (JSON.parse(JSON.stringify(value)) as JsonObject)
    : {};
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;
}

/** A tool result's content as one JSON value: plain text when it is only text. */
function toolResultOutput(content: unknown): JsonValue {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    const texts = content.filter(
      (b): b is { type: "text"; text: string } => b?.type === "text" && typeof b.text === "string",
    );
    if (texts.length === content.length) return texts.map((b) => b.text).join("\n");
    return JSON.parse(JSON.stringify(content)) as JsonValue;
  }
  return content === undefined ? null : (JSON.parse(JSON.stringify(content)) as JsonValue);
}

export class SdkMessageMapper {
  private readonly events: EventSink;
  private readonly displayToolName: (sdkName: string) => string;
  private readonly spans: SessionSpans | undefined;
  /** Streamed text items by `messageId/index`; whole assistant blocks that match one are not sent again. */
  private readonly streamed = new Map<string, StreamedItem>();
  private currentMessageId = "";
  private currentCall: CallUsage | undefined;
  private readonly announced = new Set<string>();
  private readonly hidden = new Set<string>();
  private wholeItems = 0;

  constructor(options: SdkMessageMapperOptions) {
    this.events = options.events;
    this.displayToolName = options.displayToolName;
    this.spans = options.spans;
  }

  /**
   * Sends the tool call once, whoever sees it first: the assistant message
   * or the permission gate (which must announce it before asking).
   */
  announceToolCall(callId: string, sdkName: string, input: unknown): void {
    // The structured result is the session result's structured_output, not a tool call.
    if (sdkName === STRUCTURED_OUTPUT_TOOL) {
      this.hidden.add(callId);
      return;
    }
    if (this.announced.has(callId)) return;
    this.announced.add(callId);
    const tool = this.displayToolName(sdkName);
    const value = asObject(input);
    this.spans?.toolStarted(callId, tool);
    this.events.toolCall({ callId, tool, input: value, title: toolTitle(tool, value) });
  }

  handle(message: SDKMessage): void {
    switch (message.type) {
      case "stream_event":
        if (message.parent_tool_use_id === null) this.handleStreamEvent(message.event);
        return;
      case "assistant":
        if (message.parent_tool_use_id === null) this.handleAssistant(message.message.id, message.message.content);
        return;
      case "user":
        this.handleUser(message.message.content);
        return;
      default:
        return;
    }
  }

  private handleStreamEvent(event: Extract<SDKMessage, { type: "stream_event" }>["event"]): void {
    switch (event.type) {
      case "message_start": {
        this.currentMessageId = event.message.id;
        const usage = event.message.usage;
        this.currentCall = {
          model: event.message.model,
          inputTokens: count(usage?.input_tokens),
          outputTokens: count(usage?.output_tokens),
          cacheReadTokens: count(usage?.cache_read_input_tokens),
          cacheWriteTokens: count(usage?.cache_creation_input_tokens),
        };
        this.spans?.modelCallStarted(event.message.model);
        return;
      }
      case "content_block_start": {
        const block = event.content_block;
        if (block.type === "text" || block.type === "thinking") {
          const role = block.type === "text" ? "assistant" : "thinking";
          this.streamed.set(`${this.currentMessageId}/${event.index}`, {
            itemId: `${this.currentMessageId}/${event.index}`,
            role,
            text: "",
          });
          const initial = block.type === "text" ? block.text : block.thinking;
          if (initial) this.delta(event.index, initial);
        }
        return;
      }
      case "content_block_delta": {
        const delta = event.delta;
        if (delta.type === "text_delta") this.delta(event.index, delta.text);
        else if (delta.type === "thinking_delta") this.delta(event.index, delta.thinking);
        return;
      }
      case "message_delta": {
        const usage = event.usage;
        if (this.currentCall) {
          // message_delta carries cumulative counts; input counts only on some servers.
          this.currentCall.outputTokens = Math.max(this.currentCall.outputTokens, count(usage.output_tokens));
          this.currentCall.inputTokens = Math.max(this.currentCall.inputTokens, count(usage.input_tokens));
          this.currentCall.cacheReadTokens = Math.max(
            this.currentCall.cacheReadTokens,
            count(usage.cache_read_input_tokens),
          );
          this.currentCall.cacheWriteTokens = Math.max(
            this.currentCall.cacheWriteTokens,
            count(usage.cache_creation_input_tokens),
          );
        }
        return;
      }
      case "message_stop": {
        if (this.currentCall) {
          this.events.usage({ ...this.currentCall });
          this.spans?.modelCallEnded(this.currentCall);
        }
        this.currentCall = undefined;
        return;
      }
      default:
        return;
    }
  }

  private delta(index: number, text: string): void {
    const item = this.streamed.get(`${this.currentMessageId}/${index}`);
    if (!item || text === "") return;
    item.text += text;
    this.events.text(text, { itemId: item.itemId, delta: true, role: item.role });
  }

  private handleAssistant(messageId: string, content: ReadonlyArray<{ type: string }>): void {
    for (const block of content as ReadonlyArray<{ type: string } & Record<string, unknown>>) {
      if (block.type === "text" || block.type === "thinking") {
        const role = block.type === "text" ? "assistant" : "thinking";
        const text = String((block.type === "text" ? block["text"] : block["thinking"]) ?? "");
        if (text === "" || this.alreadyStreamed(messageId, role, text)) continue;
        this.wholeItems += 1;
        this.events.text(text, { itemId: `${messageId}/whole-${this.wholeItems}`, delta: false, role });
      } else if (block.type === "tool_use" || block.type === "server_tool_use" || block.type === "mcp_tool_use") {
        this.announceToolCall(String(block["id"]), String(block["name"]), block["input"]);
      }
    }
  }

  private alreadyStreamed(messageId: string, role: string, text: string): boolean {
    for (const [key, item] of this.streamed) {
      if (key.startsWith(`${messageId}/`) && item.role === role && item.text === text) return true;
    }
    return false;
  }

  private handleUser(content: unknown): void {
    if (!Array.isArray(content)) return;
    for (const block of content as Array<Record<string, unknown>>) {
      if (block["type"] !== "tool_result" || this.hidden.has(String(block["tool_use_id"]))) continue;
      this.spans?.toolEnded(String(block["tool_use_id"]), block["is_error"] === true);
      this.events.toolResult({
        callId: String(block["tool_use_id"]),
        output: toolResultOutput(block["content"]),
        isError: block["is_error"] === true,
      });
    }
  }

  /** The session's result from the SDK's `result` message. */
  result(message: SDKResultMessage): ResultInit {
    const usage = Object.entries(message.modelUsage ?? {}).map(([model, u]) => ({
      model,
      inputTokens: count(u.inputTokens),
      outputTokens: count(u.outputTokens),
      cacheReadTokens: count(u.cacheReadInputTokens),
      cacheWriteTokens: count(u.cacheCreationInputTokens),
      reasoningTokens: count(u.thinkingTokens),
      costUsd: Number.isFinite(u.costUSD) ? u.costUSD : 0,
    }));
    const base = { usage, turns: count(message.num_turns) };
    switch (message.subtype) {
      case "success": {
        if (message.is_error) {
          const refused = proxyRefusal(message.result);
          if (refused) return { ...base, text: message.result, ...refused };
          return {
            ...base,
            stopReason: StopReason.ERROR,
            text: message.result,
            error: `the model call failed: ${message.result || "no detail"}`,
          };
        }
        const structured = message.structured_output;
        return {
          ...base,
          stopReason: StopReason.COMPLETED,
          text: message.result,
          ...(structured !== undefined && structured !== null ? { structuredOutput: asObject(structured) } : {}),
        };
      }
      case "error_max_turns":
        return {
          ...base,
          stopReason: StopReason.MAX_TURNS,
          error: message.errors.join("; ") || "reached the turn limit (limits.max_turns)",
        };
      case "error_max_budget_usd":
        return {
          ...base,
          stopReason: StopReason.BUDGET_EXHAUSTED,
          error: `${message.errors.join("; ") || "reached harness.max_budget_usd"} (spent about $${message.total_cost_usd.toFixed(4)} at list prices)`,
        };
      case "error_max_structured_output_retries":
        return {
          ...base,
          stopReason: StopReason.ERROR,
          error: `the model did not produce output valid against the output schema: ${message.errors.join("; ")}`,
        };
      default:
        return {
          ...base,
          stopReason: StopReason.ERROR,
          error: message.errors.join("; ") || "the Claude Code session failed",
        };
    }
  }
}
