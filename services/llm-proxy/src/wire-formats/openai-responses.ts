// OpenAI Responses (`POST /v1/responses`). Usage is the response's `usage`:
// `input_tokens` includes `input_tokens_details.cached_tokens`, and
// `output_tokens` includes `output_tokens_details.reasoning_tokens`. A stream
// is typed events (`response.created`, `response.output_text.delta`, …), each
// with a `sequence_number`; it ends with `response.completed`,
// `response.incomplete` or `response.failed`, whose `response` carries the
// usage (there is no `[DONE]`), and an `error` event may come at any point.
// Streamed texts: the `delta` of each text delta event (output text, refusal,
// reasoning and its summary, function call arguments, custom tool input, an
// audio answer's transcript), one text per output item and content part; the other events repeat whole texts
// (a text's `.done`, the output item, the final response).
import { scanReadsStrings } from "@oz0/serving";
import {
  fetchedUrl,
  providerSideFields,
  providerSideInputs,
  providerSideServiceTier,
  providerSideTools,
  type InputRules,
} from "../provider-side-features.js";
import type { TokenUsage } from "../proxy-store.js";
import { OPENAI_FORWARDED_HEADERS, openAiErrorBody } from "./openai-chat-completions.js";
import { sseData } from "../sse-event-splitter.js";
import { isObject, parseEvent, stringOf, usageOf, withDataText, type Json } from "./sse-json.js";
import { DeltaStreamScrubber } from "./stream-scrubbing.js";
import { readResponsesTextDelta, type ResponsesTextDelta, type TextEvent } from "./text-delta-events.js";
import { firstPositive, TextStreamMeter, tokenCount } from "./token-counts.js";
import { responseIdentity, type ProxyErrorType, type WireFormat } from "./wire-format.js";

interface ResponsesUsageFields {
  input_tokens?: number | null;
  output_tokens?: number | null;
  input_tokens_details?: { cached_tokens?: number | null } | null;
  output_tokens_details?: { reasoning_tokens?: number | null } | null;
}

/** Input is stored without the cached part; reasoning is a part of output. */
function fromResponsesUsage(usage: ResponsesUsageFields): TokenUsage {
  const cached = tokenCount(usage.input_tokens_details?.cached_tokens);
  return {
    input: Math.max(0, tokenCount(usage.input_tokens) - cached),
    output: tokenCount(usage.output_tokens),
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: tokenCount(usage.output_tokens_details?.reasoning_tokens),
  };
}

/** Why a response ended: its status, or the reason it is incomplete (`max_output_tokens`, `content_filter`). */
function responseFinishReason(response: unknown): string | undefined {
  if (!isObject(response)) return undefined;
  const incomplete = isObject(response.incomplete_details) ? stringOf(response.incomplete_details.reason) : undefined;
  return incomplete ?? stringOf(response.status);
}

/** The events that end a complete stream, each carrying the final response. */
const ENDS = new Set(["response.completed", "response.incomplete", "response.failed"]);

/** Event types whose `delta` is streamed text. */
const TEXT_DELTAS = new Set([
  "response.output_text.delta",
  "response.refusal.delta",
  "response.reasoning_text.delta",
  "response.reasoning_summary_text.delta",
  "response.function_call_arguments.delta",
  "response.custom_tool_call_input.delta",
  "response.mcp_call_arguments.delta",
  "response.code_interpreter_call_code.delta",
  // An audio answer's transcript: the model's words, which may repeat the key as any text does.
  "response.audio.transcript.delta",
]);

export class ResponsesStreamMeter extends TextStreamMeter {
  onEvent(event: string): string {
    const text = readResponsesTextDelta(event);
    if (text && TEXT_DELTAS.has(text.type)) {
      this.characters += text.text.length;
      return event;
    }
    const parsed = parseEvent(event);
    if (!parsed || typeof parsed.type !== "string") return event;
    // `response.created` and the events that end a stream carry the response (its id and model).
    if (isObject(parsed.response)) this.noteResponse(parsed.response);
    if (TEXT_DELTAS.has(parsed.type)) {
      if (typeof parsed.delta === "string") this.characters += parsed.delta.length;
    } else if (ENDS.has(parsed.type)) {
      this.ended = true;
      this.reason = responseFinishReason(parsed.response);
      const usage = usageOf(parsed.response);
      if (usage) this.reported = fromResponsesUsage(usage);
    }
    return event;
  }
}

/**
 * Holds back the end of each streamed text that may be the start of a key;
 * what is still held when the text ends goes out as one more delta event of
 * the same type, output item and content part, just before the event that
 * ends it: the text's `.done`, its content part's or output item's `.done`,
 * the end of the response or an `error`. That event repeats the last delta's
 * `sequence_number`. Every other event is scrubbed as a whole answer is,
 * string by string as decoded: the texts it repeats whole include a function
 * call's arguments, JSON inside a JSON string, whose escapes a scan of the
 * raw event would read only one level of.
 */
class ResponsesStreamScrubber extends DeltaStreamScrubber {
  /** The last delta read in its text and its text's key: the next delta mostly continues the same text. */
  #lastRead: { type: string; outputIndex: number; partIndex: number | undefined; key: string } | undefined;

  protected rewrite(event: string): string | TextEvent {
    const text = readResponsesTextDelta(event);
    if (text && TEXT_DELTAS.has(text.type)) {
      return this.delta({
        key: this.#keyOf(text),
        event,
        read: text,
        value: text.text,
        withText,
        group: text.outputIndex,
      });
    }
    const parsed = parseEvent(event);
    if (!parsed || typeof parsed.type !== "string") return event;
    const type = parsed.type;
    if (TEXT_DELTAS.has(type) && typeof parsed.delta === "string") {
      return this.delta({
        key: textKey(type, parsed.output_index, parsed.content_index ?? parsed.summary_index),
        event,
        read: { parsed, field: "delta" },
        value: parsed.delta,
        withText,
        group: parsed.output_index,
      });
    }
    let held = "";
    if (type.endsWith(".done") && TEXT_DELTAS.has(`${type.slice(0, -".done".length)}.delta`)) {
      const ended = textKey(
        `${type.slice(0, -".done".length)}.delta`,
        parsed.output_index,
        parsed.content_index ?? parsed.summary_index,
      );
      held = this.end((key) => key === ended);
    } else if (
      type === "response.content_part.done" ||
      type === "response.output_item.done" ||
      type === "response.reasoning_summary_part.done"
    ) {
      held = this.end((_key, outputIndex) => outputIndex === parsed.output_index);
    } else if (ENDS.has(type) || type === "error") {
      held = this.end();
    }
    return held + this.#wholeStrings(event);
  }

  /**
   * The key of a delta's text, the same string as the last delta's when it
   * continues that text: a key made again was hashed again to find its text,
   * a cost in every event.
   */
  #keyOf({ type, outputIndex, partIndex }: ResponsesTextDelta): string {
    const last = this.#lastRead;
    if (last && last.type === type && last.outputIndex === outputIndex && last.partIndex === partIndex) return last.key;
    const key = textKey(type, outputIndex, partIndex);
    this.#lastRead = { type, outputIndex, partIndex, key };
    return key;
  }

  /**
   * The event with each string of its data scrubbed as its decoded text. Every event is scrubbed as
   * text on its way out (`push`), which is that scrub when no string's escapes hide a second level:
   * such an event is not read twice (the four that repeat a whole text were a fifth of a stream's work).
   */
  #wholeStrings(event: string): string {
    const data = sseData(event)!;
    if (scanReadsStrings(data)) return event;
    const scrubbed = this.scrubber.json(data);
    return scrubbed === data ? event : withDataText(event, scrubbed);
  }
}

/** A text's key: `{type}:{output_index}:{content_index or summary_index}`. */
function textKey(deltaType: string, outputIndex: unknown, partIndex: unknown): string {
  return `${deltaType}:${String(outputIndex)}:${String(partIndex ?? "")}`;
}

/** A delta event carrying `text` instead of its own. */
const withText = (last: Json, text: string): Json => ({ ...last, delta: text });

/** The stream event of an error (the budget ran out): Responses' own `error` event. */
function streamErrorEvent(type: ProxyErrorType, message: string): string {
  return `event: error\ndata: ${JSON.stringify({ type: "error", code: type, message, param: null })}\n\n`;
}

/**
 * The Responses tools the client runs: its functions and custom tools, and
 * the shell, patch and computer-use actions the model asks the client to
 * carry out. The rest are hosted tools, web_search under each of its names.
 */
/** An input image or file given by a URL the provider fetches (not a data URL), a file it holds, an item it stored. */
const RESPONSES_INPUTS: InputRules = {
  fields: ["input"],
  needles: ['url"', "file_id", "item_reference"],
  classify(node) {
    if (fetchedUrl(node.image_url) || fetchedUrl(node.file_url)) return "input_urls";
    if ("file_id" in node || node.type === "item_reference") return "stored_context";
    return undefined;
  },
};

const RESPONSES_TOOL_KINDS = {
  runByClient: (type: string | undefined) =>
    type !== undefined &&
    ["function", "custom", "local_shell", "shell", "apply_patch", "computer_use_preview"].includes(type),
  feature: (type: string) => (type.startsWith("web_search") ? "web_search" : type),
};
export const openAiResponses: WireFormat = {
  name: "openai-responses",
  route: "responses",
  forwardedHeaders: OPENAI_FORWARDED_HEADERS,
  keyHeader: "bearer",
  errorBody: openAiErrorBody,
  calls: {
    readRequest: (body) => ({
      model: stringOf(body.field("model")),
      stream: body.field("stream") === true,
      maxOutputTokens: firstPositive(body.field("max_output_tokens")),
      outputLimitFields: (tokens) => ({ max_output_tokens: tokens }),
      providerSide: [
        ...providerSideTools(body, RESPONSES_TOOL_KINDS),
        ...providerSideFields(body, {
          background: "background",
          previous_response_id: "stored_context",
          conversation: "stored_context",
          prompt: "stored_context",
        }),
        ...providerSideInputs(body, RESPONSES_INPUTS),
        ...providerSideServiceTier(body),
      ],
      streamMeter: () => new ResponsesStreamMeter(),
    }),
    answerUsage(answer) {
      const usage = usageOf(answer);
      return usage && fromResponsesUsage(usage);
    },
    finishReason: responseFinishReason,
    responseOf: responseIdentity,
    streamScrubber: (scrubber) => new ResponsesStreamScrubber(scrubber),
    streamErrorEvent,
  },
};
