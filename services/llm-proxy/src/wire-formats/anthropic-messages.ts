// Anthropic Messages (`POST /v1/messages`). Usage: `message_start` carries the
// input and cache counts, `message_delta` the final ones, merged field by
// field (a field absent or null in the delta keeps the start's value); input
// is reported without cache tokens. Streamed texts: a content block's `text`,
// `partial_json` or `thinking` deltas.
import {
  anthropicPricedAbove,
  providerSideFields,
  providerSideInputs,
  providerSideTools,
  type InputRules,
  type ProviderSideUse,
} from "../provider-side-features.js";
import type { TokenUsage } from "../proxy-store.js";
import { DeltaStreamScrubber } from "./stream-scrubbing.js";
import { ANTHROPIC_TEXT_FIELDS, readAnthropicTextDelta, type TextEvent } from "./text-delta-events.js";
import { isObject, parseEvent, stringOf, usageOf, type Json } from "./sse-json.js";
import { estimateTokens, firstPositive, TextStreamMeter, tokenCount } from "./token-counts.js";
import {
  responseIdentity,
  type ProxyErrorType,
  type RequestBody,
  type StreamMeterReading,
  type WireFormat,
  type WireRequest,
} from "./wire-format.js";

/** Anthropic `usage` fields; all optional because message_delta may carry any subset. */
interface AnthropicUsageFields {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}

function fromAnthropicUsage(usage: AnthropicUsageFields | undefined): TokenUsage {
  return {
    input: tokenCount(usage?.input_tokens),
    output: tokenCount(usage?.output_tokens),
    cacheRead: tokenCount(usage?.cache_read_input_tokens),
    cacheWrite: tokenCount(usage?.cache_creation_input_tokens),
    reasoning: 0,
  };
}

/** The error shape of Anthropic's APIs (Messages and count_tokens). */
export function anthropicErrorBody(type: ProxyErrorType, message: string): unknown {
  return { type: "error", error: { type, message } };
}

/**
 * The headers of a client request to Anthropic's APIs that reach the provider:
 * the API version and the beta features the request is written against
 * (Claude Code asks for several betas; without them its requests fail), and
 * the two headers Claude Code identifies itself with (the scripted provider
 * tells its side calls from an agent's turns by them).
 */
export const ANTHROPIC_FORWARDED_HEADERS: readonly string[] = [
  "anthropic-version",
  "anthropic-beta",
  "accept",
  "user-agent",
  "x-app",
];

/** The Messages API version sent when the client names none. */
export const ANTHROPIC_DEFAULT_HEADERS: Readonly<Record<string, string>> = { "anthropic-version": "2023-06-01" };

export class AnthropicStreamMeter extends TextStreamMeter {
  #fields: AnthropicUsageFields = {};
  #sawStart = false;
  #sawDelta = false;

  onEvent(event: string): string {
    const text = readAnthropicTextDelta(event);
    if (text) {
      this.characters += text.text.length;
      return event;
    }
    const parsed = parseEvent(event) as
      | {
          type?: string;
          message?: { usage?: AnthropicUsageFields };
          usage?: AnthropicUsageFields;
          delta?: Record<string, unknown>;
        }
      | undefined;
    if (!parsed) return event;
    switch (parsed.type) {
      case "message_start":
        this.#sawStart = true;
        this.noteResponse(parsed.message);
        this.#fields = { ...(parsed.message?.usage ?? {}) };
        break;
      case "message_delta":
        this.#sawDelta = true;
        this.reason = stringOf(parsed.delta?.stop_reason) ?? this.reason;
        for (const [field, value] of Object.entries(parsed.usage ?? {})) {
          if (typeof value === "number") (this.#fields as Record<string, number>)[field] = value;
        }
        break;
      case "content_block_delta": {
        const delta = parsed.delta ?? {};
        for (const key of Object.values(ANTHROPIC_TEXT_FIELDS)) {
          const value = delta[key];
          if (typeof value === "string") this.characters += value.length;
        }
        break;
      }
      case "message_stop":
        this.ended = true;
        break;
      default:
        break;
    }
    return event;
  }

  /** `message_start` merged with `message_delta`; `estimatedInput` stands in for the input when the stream ended before `message_start`. */
  override reading(estimatedInput: number): StreamMeterReading {
    const usage = fromAnthropicUsage(this.#fields);
    if (this.#sawDelta) return { usage, estimated: false };
    if (!this.#sawStart) usage.input = estimatedInput;
    usage.output = Math.max(usage.output, estimateTokens(this.characters));
    return { usage, estimated: true };
  }
}

/** A content_block_delta carrying `text` in `field` instead of its own. */
function withTextIn(field: string): (last: Json, text: string) => Json {
  return (last, text) => ({ ...last, delta: { ...(last.delta as Json), [field]: text } });
}

/** Events after which no block streams any more: everything held goes out before them. */
const ENDS = new Set(["message_delta", "message_stop", "error"]);

/**
 * Holds back the end of each content block's streamed text that may be the
 * start of a key; what is still held when the block stops goes out as one
 * more delta just before `content_block_stop` (or `message_delta`,
 * `message_stop`, `error`).
 */
class AnthropicStreamScrubber extends DeltaStreamScrubber {
  protected rewrite(event: string): string | TextEvent {
    const text = readAnthropicTextDelta(event);
    if (text) {
      const { index, field, textStart, textEnd } = text;
      return this.delta({
        key: String(index),
        event,
        read: { textStart, textEnd },
        value: text.text,
        withText: withTextIn(field),
      });
    }
    const parsed = parseEvent(event);
    if (!parsed) return event;
    const delta = parsed.delta;
    if (
      parsed.type === "content_block_delta" &&
      typeof parsed.index === "number" &&
      isObject(delta) &&
      typeof delta.type === "string"
    ) {
      // Own members only: a provider's `"type": "toString"` names no text field.
      const field: string | undefined = Object.hasOwn(ANTHROPIC_TEXT_FIELDS, delta.type)
        ? ANTHROPIC_TEXT_FIELDS[delta.type as keyof typeof ANTHROPIC_TEXT_FIELDS]
        : undefined;
      const value = field ? delta[field] : undefined;
      if (field && typeof value === "string") {
        return this.delta({
          key: String(parsed.index),
          event,
          read: { parsed, field },
          value,
          withText: withTextIn(field),
        });
      }
    }
    let held = "";
    if (parsed.type === "content_block_stop" && typeof parsed.index === "number")
      held = this.end((key) => key === String(parsed.index));
    else if (typeof parsed.type === "string" && ENDS.has(parsed.type)) held = this.end();
    return held + event;
  }
}

/**
 * Anthropic's tools the client runs: its own (no type, or `custom`) and the
 * client tools Anthropic defines a schema for (bash, the text editor, computer
 * use, memory). Every other type is a server tool, named without its version
 * date: `web_search_20250305` is web_search.
 */
/**
 * An image or a document whose `source` is a URL the provider fetches, or a
 * file it holds; a tool call's `input` is the model's own, and no input.
 */
const ANTHROPIC_INPUTS: InputRules = {
  fields: ["messages", "system"],
  needles: ['url"', "file_id"],
  classify(node) {
    if (node.type === "tool_use" || node.type === "server_tool_use") return "skip";
    if ("file_id" in node) return "stored_context";
    const source = node.source;
    if (!isObject(source)) return undefined;
    if (source.type === "url" || "url" in source) return "input_urls";
    if (source.type === "file" || "file_id" in source) return "stored_context";
    return undefined;
  },
};

const ANTHROPIC_TOOL_KINDS = {
  runByClient: (type: string | undefined) =>
    type === undefined || type === "custom" || /^(bash|text_editor|computer|memory)_\d{8}$/.test(type),
  feature: (type: string) => type.replace(/_\d{8}$/, ""),
};
/**
 * What a Messages request asks Anthropic to do on its own side. count_tokens reads the same: to count
 * a request Anthropic fetches its images and documents given by URL and lists its MCP servers' tools.
 */
export function anthropicProviderSide(
  body: RequestBody,
  headers: Readonly<Record<string, string | string[] | undefined>>,
): ProviderSideUse[] {
  return [
    ...providerSideTools(body, ANTHROPIC_TOOL_KINDS),
    ...providerSideFields(body, { mcp_servers: "mcp", container: "code_execution" }),
    ...providerSideInputs(body, ANTHROPIC_INPUTS),
    ...anthropicPricedAbove(body, headers),
  ];
}

/** The least `thinking.budget_tokens` Anthropic takes; it must also be below `max_tokens`. */
const MIN_THINKING_BUDGET = 1_024;

/** The `budget_tokens` of a request's extended thinking, when it enables it with one. */
function thinkingBudget(body: RequestBody): number | undefined {
  const thinking = body.field("thinking");
  return isObject(thinking) && thinking.type === "enabled" && typeof thinking.budget_tokens === "number"
    ? thinking.budget_tokens
    : undefined;
}

/**
 * `max_tokens` bounded to `tokens`, and the thinking budget under it: Anthropic refuses (400) a
 * `budget_tokens` not below `max_tokens`, so a stream bounded to its hold near the budget's end would fail.
 */
function anthropicOutputLimit(body: RequestBody, tokens: number): Record<string, unknown> {
  const budget = thinkingBudget(body);
  if (budget === undefined || budget < tokens) return { max_tokens: tokens };
  const thinking = body.field("thinking") as Record<string, unknown>;
  return { max_tokens: tokens, thinking: { ...thinking, budget_tokens: Math.max(MIN_THINKING_BUDGET, tokens - 1) } };
}

export const anthropicMessages: WireFormat = {
  name: "anthropic",
  route: "messages",
  forwardedHeaders: ANTHROPIC_FORWARDED_HEADERS,
  defaultHeaders: ANTHROPIC_DEFAULT_HEADERS,
  keyHeader: "x-api-key",
  errorBody: anthropicErrorBody,
  calls: {
    readRequest(body: RequestBody, headers): WireRequest {
      return {
        model: stringOf(body.field("model")),
        stream: body.field("stream") === true,
        maxOutputTokens: firstPositive(body.field("max_tokens")),
        outputLimitFields: (tokens) => anthropicOutputLimit(body, tokens),
        ...(thinkingBudget(body) !== undefined ? { minBoundedOutput: MIN_THINKING_BUDGET + 1 } : {}),
        providerSide: anthropicProviderSide(body, headers),
        streamMeter: () => new AnthropicStreamMeter(),
      };
    },
    answerUsage(answer) {
      const usage = usageOf(answer);
      return usage && fromAnthropicUsage(usage);
    },
    finishReason: (answer) => (isObject(answer) ? stringOf(answer.stop_reason) : undefined),
    responseOf: responseIdentity,
    streamScrubber: (scrubber) => new AnthropicStreamScrubber(scrubber),
    streamErrorEvent: (type, message) => `event: error\ndata: ${JSON.stringify(anthropicErrorBody(type, message))}\n\n`,
  },
};
