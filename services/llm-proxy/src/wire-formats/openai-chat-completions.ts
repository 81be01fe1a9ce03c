// OpenAI Chat Completions (`POST /v1/chat/completions`). A stream carries its
// usage only when asked (`stream_options.include_usage`): the proxy always
// asks, and for a client that did not, drops the usage chunk and the
// `usage: null` field the option adds to every chunk, so the client sees what
// it asked for. `prompt_tokens` includes cached tokens and
// `completion_tokens` reasoning ones. Streamed texts: a choice's `content`,
// `reasoning_content`, `reasoning` or `refusal`, and its tool calls' `arguments`.
import type { HeldTextScrubber } from "@oz0/serving";
import {
  fetchedUrl,
  providerSideFields,
  providerSideInputs,
  providerSideServiceTier,
  providerSideTools,
  type InputRules,
} from "../provider-side-features.js";
import type { TokenUsage } from "../proxy-store.js";
import { sseData } from "../sse-event-splitter.js";
import { DeltaStreamScrubber } from "./stream-scrubbing.js";
import {
  CHAT_TEXT_FIELDS,
  readChatTextDelta,
  rememberChatTextDelta,
  withSentText,
  type ChatTextField,
  type TextEvent,
} from "./text-delta-events.js";
import { JsonRequestBody } from "../request-body.js";
import {
  isObject,
  parseEvent,
  rememberParsed,
  stringOf,
  usageOf,
  withData,
  withDataText,
  withStringMember,
  type Json,
} from "./sse-json.js";
import { TextStreamMeter, tokenCount } from "./token-counts.js";
import {
  responseIdentity,
  type ProxyErrorType,
  type RequestBody,
  type WireFormat,
  type WireRequest,
} from "./wire-format.js";

interface OpenAiUsageFields {
  prompt_tokens?: number | null;
  completion_tokens?: number | null;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
  completion_tokens_details?: { reasoning_tokens?: number | null } | null;
}

/** Input is stored without the cached part; reasoning is a part of output. */
function fromOpenAiUsage(usage: OpenAiUsageFields | undefined): TokenUsage {
  const cached = tokenCount(usage?.prompt_tokens_details?.cached_tokens);
  return {
    input: Math.max(0, tokenCount(usage?.prompt_tokens) - cached),
    output: tokenCount(usage?.completion_tokens),
    cacheRead: cached,
    cacheWrite: 0,
    reasoning: tokenCount(usage?.completion_tokens_details?.reasoning_tokens),
  };
}

/** The error shape of OpenAI's APIs (Chat Completions and Responses). */
export function openAiErrorBody(type: ProxyErrorType, message: string): unknown {
  return { error: { message, type, code: type, param: null } };
}

/**
 * The headers of a client request to OpenAI's APIs that reach the provider.
 * The organization and project of an OpenAI key are the key holder's
 * choice, not a session's: openai-organization and openai-project stay here.
 */
export const OPENAI_FORWARDED_HEADERS: readonly string[] = ["accept", "user-agent"];

interface Chunk {
  choices?: {
    delta?: Partial<Record<ChatTextField, string | null>> & {
      tool_calls?: { function?: { arguments?: string } }[];
      function_call?: { arguments?: string };
      audio?: { transcript?: string };
    };
    finish_reason?: string | null;
  }[];
  usage?: OpenAiUsageFields | null;
}

/** The characters of every text a chunk's delta streams: what the estimate of its output counts. */
function streamedCharacters(delta: NonNullable<NonNullable<Chunk["choices"]>[number]["delta"]>): number {
  let characters = 0;
  for (const field of CHAT_TEXT_FIELDS) {
    const value = delta[field];
    if (typeof value === "string") characters += value.length;
  }
  for (const call of delta.tool_calls ?? []) characters += stringLength(call.function?.arguments);
  return characters + stringLength(delta.function_call?.arguments) + stringLength(delta.audio?.transcript);
}

function stringLength(value: unknown): number {
  return typeof value === "string" ? value.length : 0;
}

/** The usage the proxy asked for, null on every chunk but the last, as OpenAI writes it: not first, on one line. */
const NULL_USAGE = ',"usage":null';
/**
 * What may follow it to the chunk's end for it to be cut without a parse:
 * string members whose name and value hold no quote or backslash (OpenAI's
 * `obfuscation` padding, written after `usage`), then the closing brace.
 * Read back from that brace, each is a whole member of the top-level
 * object, and so is the `usage` before them.
 */
const PLAIN_STRING_MEMBERS_TO_END = /(?:,"[^"\\]*":"[^"\\]*")*\}$/y;

export class OpenAiStreamMeter extends TextStreamMeter {
  readonly #clientWantsUsage: boolean;

  constructor(options: { clientWantsUsage: boolean }) {
    super();
    this.#clientWantsUsage = options.clientWantsUsage;
  }

  onEvent(event: string): string | undefined {
    // Once the stream named its answer (noteResponse keeps the first id and model), a chunk of
    // text only adds characters, and the usage: null the proxy asked for is cut where it lies.
    const text =
      this.response.model !== undefined && this.response.id !== undefined ? readChatTextDelta(event) : undefined;
    if (text) {
      // Every streamed text is output the provider bills: reasoning and refusals as much as content.
      this.characters += text.text.length;
      if (this.#clientWantsUsage || text.nullUsageAt < 0) return event;
      const cut = event.slice(0, text.nullUsageAt) + event.slice(text.nullUsageAt + NULL_USAGE.length);
      rememberChatTextDelta(cut, { ...text, nullUsageAt: -1 });
      return cut;
    }
    const data = sseData(event);
    if (data === undefined) return event;
    if (data.trim() === "[DONE]") {
      this.ended = true;
      return event;
    }
    const chunk = parseEvent(event) as Chunk | undefined;
    if (!chunk) return event;
    this.noteResponse(chunk);
    for (const choice of chunk.choices ?? []) {
      if (typeof choice.finish_reason === "string") this.reason ??= choice.finish_reason;
      if (choice.delta) this.characters += streamedCharacters(choice.delta);
    }
    if (chunk.usage) this.reported = fromOpenAiUsage(chunk.usage);
    if (this.#clientWantsUsage || !("usage" in chunk)) return event;
    // The client did not ask for usage: hide what the injected option added.
    if (chunk.usage && (chunk.choices ?? []).length === 0) return undefined;
    // OpenAI writes it once, last or followed only by its `obfuscation` padding: cut from the text
    // (the event's one data line) without a parse.
    const at = chunk.usage === null ? cutOfNullUsage(data) : -1;
    if (at >= 0 && event.length === data.length + 8 && event.startsWith("data: ")) {
      const cut = `data: ${data.slice(0, at)}${data.slice(at + NULL_USAGE.length)}\n\n`;
      // The scrubber reads the same chunk next: what the cut text parses to, without parsing it.
      const { usage: _usage, ...rest } = chunk as Json;
      rememberParsed(cut, rest);
      return cut;
    }
    // Taken out of the provider's own text: the rest of the chunk goes on byte for byte.
    const body = JsonRequestBody.parse(Buffer.from(data));
    return body ? withDataText(event, body.without("usage").toString()) : event;
  }
}

/**
 * Where the top-level `,"usage":null` starts in a chunk's data, when only
 * plain string members follow it to the end and no other `"usage"` comes
 * before it (one nested deeper, say); otherwise -1, and the caller parses.
 */
function cutOfNullUsage(data: string): number {
  const at = data.lastIndexOf(NULL_USAGE);
  if (at < 0 || data.indexOf('"usage"') !== at + 1) return -1;
  PLAIN_STRING_MEMBERS_TO_END.lastIndex = at + NULL_USAGE.length;
  return PLAIN_STRING_MEMBERS_TO_END.test(data) ? at : -1;
}

/** A streamed text of one choice: a delta field, or a tool call's arguments. */
type ChannelShape =
  | { kind: "field"; field: string }
  | { kind: "tool"; toolIndex: number }
  | { kind: "nested"; parent: NestedText[0]; member: NestedText[1] };
type Channel = ChannelShape & { held: HeldTextScrubber };

/**
 * Texts a choice's delta streams one level down: the legacy `function_call`'s
 * arguments (`functions` is still accepted) and an audio answer's transcript.
 * A request may ask for either, so each is held across chunks like `content`.
 */
const NESTED_TEXTS = [
  ["function_call", "arguments"],
  ["audio", "transcript"],
] as const;
type NestedText = (typeof NESTED_TEXTS)[number];

/**
 * Holds back the end of each streamed text of each choice that may be the
 * start of a key; what is still held when the text ends goes out as one more
 * chunk just before the choice's `finish_reason` chunk, the usage chunk or
 * `[DONE]`.
 */
class OpenAiStreamScrubber extends DeltaStreamScrubber {
  /** By choice index, by `field` or `tool:{index}`. */
  readonly #choices = new Map<number, Map<string, Channel>>();
  /** The last chunk with choices: its other fields (id, model, created, …) go on the chunks that carry held text. */
  #lastChunk: Json | undefined;

  protected rewrite(event: string): string | TextEvent {
    const text = readChatTextDelta(event);
    if (text) {
      // One choice's next text, and nothing else: held back or let go, spliced where it lies.
      const { held } = this.#channel(text.index, text.field, { kind: "field", field: text.field });
      const sent = held.push(text.text);
      return withSentText(event, text, { came: text.text, sent, plain: held.sentPlain });
    }
    const data = sseData(event);
    if (data !== undefined && data.trim() === "[DONE]") return this.#flushAll() + event;
    const chunk = parseEvent(event);
    if (!chunk) return event;
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as unknown[]) : [];
    // A chunk without choices (the usage chunk) or with an error comes after the texts ended.
    let before = choices.length === 0 || chunk.error !== undefined ? this.#flushAll() : "";
    // Copies only of what changes: most chunks go on as they came.
    let rewritten: unknown[] | undefined;
    /** Each text a delta changed: its member's name, what came and what goes. */
    const edits: [string, string, string][] = [];
    for (let i = 0; i < choices.length; i += 1) {
      const choice = choices[i];
      if (!isObject(choice) || !isObject(choice.delta)) continue;
      const index = typeof choice.index === "number" ? choice.index : 0;
      const finishing = choice.finish_reason !== null && choice.finish_reason !== undefined;
      let delta: Json | undefined;
      const touched: string[] = [];
      /** One text's piece in this chunk through its channel: what of it goes now (all that is held, when the choice finishes). */
      const pass = (key: string, shape: ChannelShape, value: string): string => {
        const { held } = this.#channel(index, key, shape);
        touched.push(key);
        return held.push(value) + (finishing ? held.flush() : "");
      };
      for (const field of CHAT_TEXT_FIELDS) {
        const value = choice.delta[field];
        if (typeof value !== "string") continue;
        const sent = pass(field, { kind: "field", field }, value);
        if (sent === value) continue;
        (delta ??= { ...choice.delta })[field] = sent;
        edits.push([field, value, sent]);
      }
      for (const [parent, member] of NESTED_TEXTS) {
        const holder = choice.delta[parent];
        if (!isObject(holder) || typeof holder[member] !== "string") continue;
        const value = holder[member];
        const sent = pass(`${parent}.${member}`, { kind: "nested", parent, member }, value);
        if (sent === value) continue;
        (delta ??= { ...choice.delta })[parent] = { ...holder, [member]: sent };
        edits.push([member, value, sent]);
      }
      const calls = choice.delta.tool_calls;
      if (Array.isArray(calls)) {
        let rewrittenCalls: unknown[] | undefined;
        for (let c = 0; c < calls.length; c += 1) {
          const call: unknown = calls[c];
          if (!isObject(call) || !isObject(call.function) || typeof call.function.arguments !== "string") continue;
          const toolIndex = typeof call.index === "number" ? call.index : 0;
          const value = call.function.arguments;
          const sent = pass(`tool:${toolIndex}`, { kind: "tool", toolIndex }, value);
          if (sent === value) continue;
          (rewrittenCalls ??= calls.slice())[c] = { ...call, function: { ...call.function, arguments: sent } };
          edits.push(["arguments", value, sent]);
        }
        if (rewrittenCalls) (delta ??= { ...choice.delta }).tool_calls = rewrittenCalls;
      }
      if (finishing) {
        // Texts of this choice that did not stream in this chunk end here too: their held
        // text goes in a chunk of its own just before.
        for (const [key, channel] of this.#choices.get(index) ?? [])
          if (!touched.includes(key)) before += this.#held(index, channel, channel.held.flush());
        this.#choices.delete(index);
      }
      if (delta) (rewritten ??= choices.slice())[i] = { ...choice, delta };
    }
    if (choices.length > 0) this.#lastChunk = chunk;
    if (!rewritten) return before + event;
    // Spliced into the provider's text where each changed text is found once; else written again.
    let out: string | undefined = event;
    for (const [field, value, sent] of edits) {
      out = withStringMember(out, field, value, sent);
      if (out === undefined) break;
    }
    return before + (out ?? withData(event, { ...chunk, choices: rewritten }));
  }

  /** The channel of one text of a choice: a delta field, a tool call's arguments, or a nested text. */
  #channel(index: number, key: string, shape: ChannelShape): Channel {
    let channels = this.#choices.get(index);
    if (!channels) {
      channels = new Map();
      this.#choices.set(index, channels);
    }
    let channel = channels.get(key);
    if (!channel) {
      const held = this.scrubber.held();
      channel = { ...shape, held };
      channels.set(key, channel);
    }
    return channel;
  }

  #flushAll(): string {
    let out = "";
    for (const [index, channels] of this.#choices)
      for (const channel of channels.values()) out += this.#held(index, channel, channel.held.flush());
    this.#choices.clear();
    return out;
  }

  /** A chunk carrying a text's last held part, shaped like the upstream's own chunks. */
  #held(index: number, channel: Channel, tail: string): string {
    if (tail === "") return "";
    const delta =
      channel.kind === "field"
        ? { [channel.field]: tail }
        : channel.kind === "tool"
          ? { tool_calls: [{ index: channel.toolIndex, function: { arguments: tail } }] }
          : { [channel.parent]: { [channel.member]: tail } };
    const envelope: Json = { ...(this.#lastChunk ?? { object: "chat.completion.chunk" }) };
    delete envelope.choices;
    if ("usage" in envelope) envelope.usage = null;
    return `data: ${JSON.stringify({ ...envelope, choices: [{ index, delta, finish_reason: null }] })}\n\n`;
  }
}

/**
 * The most output tokens a chat request lets the provider bill: its limit for
 * each of its `n` choices. A request that names its limit twice is read at the
 * larger: OpenAI refuses both at once, but compatible servers differ on which
 * wins, and the budget must hold whichever they use.
 */
function chatOutputBound(body: RequestBody, choices: number): number | undefined {
  const limits = [body.field("max_tokens"), body.field("max_completion_tokens")].filter(
    (value): value is number => typeof value === "number" && value > 0,
  );
  if (limits.length === 0) return undefined;
  return Math.max(...limits) * choices;
}

/**
 * Each choice's output bounded to `tokens`: every limit the request names (a compatible server may read either),
 * else `max_completion_tokens` (reasoning models refuse `max_tokens`).
 */
function chatOutputLimit(body: RequestBody, tokens: number): Record<string, number> {
  const named = ["max_tokens", "max_completion_tokens"].filter((name) => body.field(name) != null);
  return Object.fromEntries((named.length > 0 ? named : ["max_completion_tokens"]).map((name) => [name, tokens]));
}

/** How many choices the request asks for (`n`): 1 unless it asks for more. */
function choicesOf(body: RequestBody): number {
  const n = body.field("n");
  return typeof n === "number" && Number.isInteger(n) && n > 1 ? n : 1;
}

/** Chat's tools are the client's (`function`, `custom`); search is a field of its own (`web_search_options`). */
/** An `image_url` part the provider fetches (not a data URL), or a file it holds. */
const CHAT_INPUTS: InputRules = {
  fields: ["messages"],
  needles: ['url"', "file_id"],
  classify(node) {
    const image = node.image_url;
    if (fetchedUrl(isObject(image) ? image.url : image)) return "input_urls";
    if ("file_id" in node) return "stored_context";
    return undefined;
  },
};

const CHAT_TOOL_KINDS = {
  runByClient: (type: string | undefined) => type === "function" || type === "custom",
  feature: (type: string) => type,
};
export const openAiChatCompletions: WireFormat = {
  name: "openai",
  route: "chat/completions",
  forwardedHeaders: OPENAI_FORWARDED_HEADERS,
  keyHeader: "bearer",
  errorBody: openAiErrorBody,
  calls: {
    readRequest(body: RequestBody): WireRequest {
      const stream = body.field("stream") === true;
      const streamOptions = body.field("stream_options") as { include_usage?: boolean } | undefined;
      const clientWantsUsage = !stream || streamOptions?.include_usage === true;
      const choices = choicesOf(body);
      return {
        model: stringOf(body.field("model")),
        stream,
        maxOutputTokens: chatOutputBound(body, choices),
        outputLimitFields: (tokens) => chatOutputLimit(body, tokens),
        ...(choices > 1 ? { answers: choices } : {}),
        providerSide: [
          ...providerSideTools(body, CHAT_TOOL_KINDS),
          ...providerSideFields(body, { web_search_options: "web_search" }),
          ...providerSideInputs(body, CHAT_INPUTS),
          ...providerSideServiceTier(body),
        ],
        ...(clientWantsUsage
          ? {}
          : { upstreamFields: { stream_options: { ...(streamOptions ?? {}), include_usage: true } } }),
        streamMeter: () => new OpenAiStreamMeter({ clientWantsUsage }),
      };
    },
    answerUsage(answer) {
      const usage = usageOf(answer);
      return usage && fromOpenAiUsage(usage);
    },
    finishReason(answer) {
      const choices = isObject(answer) && Array.isArray(answer.choices) ? answer.choices : [];
      return isObject(choices[0]) ? stringOf(choices[0].finish_reason) : undefined;
    },
    responseOf: responseIdentity,
    streamScrubber: (scrubber) => new OpenAiStreamScrubber(scrubber),
    streamErrorEvent: (type, message) => `data: ${JSON.stringify(openAiErrorBody(type, message))}\n\n`,
  },
};
