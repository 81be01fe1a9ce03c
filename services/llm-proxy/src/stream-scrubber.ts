// Scrubs a streamed answer event by event, reading each streamed text across
// its deltas: an Anthropic content block's `text`, `partial_json` or
// `thinking` deltas, an OpenAI choice's `content`, `reasoning_content`,
// `reasoning` or `refusal`, and each of its tool calls' `arguments`. A key
// sent one short delta at a time never sits whole in one event, so each
// text's deltas go through a HeldTextScrubber: a delta is rewritten to carry
// what is safe to send, the rest rides on the next delta, and what is still
// held when the text ends is sent in one more delta event just before the
// event that ends it. What goes out is then scrubbed as text, once, for every
// other string of every event (the scan reads JSON escapes, and a run cannot
// cross a JSON string's quotes).
import type { HeldTextScrubber, SecretScrubber } from "@oz0/serving";
import { sseData } from "./sse-event-splitter.js";
import type { Wire } from "./wire-errors.js";

export interface StreamScrubber {
  /** What to forward for one whole upstream event: "" (nothing yet), the event, or held text and then the event. */
  push(event: string): string;
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

/** The event with its data replaced by `data` (one line), its other lines kept. */
function withData(event: string, data: unknown): string {
  let out = "";
  let wrote = false;
  for (const line of event.split(/\r?\n/)) {
    if (line === "") continue;
    if (!line.startsWith("data:")) out += `${line}\n`;
    else if (!wrote) {
      out += `data: ${JSON.stringify(data)}\n`;
      wrote = true;
    }
  }
  return `${out}\n`;
}

/** The event parsed, or undefined when its data is not a JSON object. */
function parseEvent(event: string): Json | undefined {
  const data = sseData(event);
  if (data === undefined) return undefined;
  try {
    const parsed: unknown = JSON.parse(data);
    return isObject(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** The scrubber for one stream of the given API. Events pass untouched when there is no key to scrub. */
export function createStreamScrubber(options: { scrubber: SecretScrubber; wire: Wire }): StreamScrubber {
  if (!options.scrubber.active) return { push: (event) => event };
  return options.wire === "anthropic" ? new AnthropicStreamScrubber(options.scrubber) : new OpenAiStreamScrubber(options.scrubber);
}

/** Which field of each Anthropic delta type carries streamed text. */
const ANTHROPIC_TEXT_FIELDS: Readonly<Record<string, string>> = { text_delta: "text", input_json_delta: "partial_json", thinking_delta: "thinking" };
/** Events after which no block streams any more: everything held goes out before them. */
const ANTHROPIC_ENDS = new Set(["message_delta", "message_stop", "error"]);

interface AnthropicBlock {
  held: HeldTextScrubber;
  deltaType: string;
  field: string;
}

class AnthropicStreamScrubber implements StreamScrubber {
  readonly #scrubber: SecretScrubber;
  readonly #blocks = new Map<number, AnthropicBlock>();

  constructor(scrubber: SecretScrubber) {
    this.#scrubber = scrubber;
  }

  push(event: string): string {
    return this.#scrubber.text(this.#rewrite(event));
  }

  /** The event with its streamed text held back or let go, preceded by held text it ends. */
  #rewrite(event: string): string {
    const parsed = parseEvent(event);
    if (!parsed) return event;
    const delta = parsed.delta;
    if (parsed.type === "content_block_delta" && typeof parsed.index === "number" && isObject(delta) && typeof delta.type === "string") {
      const field = ANTHROPIC_TEXT_FIELDS[delta.type];
      const value = field ? delta[field] : undefined;
      if (field && typeof value === "string") {
        let block = this.#blocks.get(parsed.index);
        if (!block) {
          block = { held: this.#scrubber.held(), deltaType: delta.type, field };
          this.#blocks.set(parsed.index, block);
        }
        const sent = block.held.push(value);
        // Nothing of this delta may go yet: the client gets it with the next one.
        if (sent === "") return "";
        return sent === value ? event : withData(event, { ...parsed, delta: { ...delta, [field]: sent } });
      }
    }
    let held = "";
    if (parsed.type === "content_block_stop" && typeof parsed.index === "number") held = this.#flush(parsed.index);
    else if (typeof parsed.type === "string" && ANTHROPIC_ENDS.has(parsed.type)) for (const index of [...this.#blocks.keys()]) held += this.#flush(index);
    return held + event;
  }

  /** The block's held text as one more delta event; the block has ended. */
  #flush(index: number): string {
    const block = this.#blocks.get(index);
    if (!block) return "";
    this.#blocks.delete(index);
    const tail = block.held.flush();
    if (tail === "") return "";
    const data = { type: "content_block_delta", index, delta: { type: block.deltaType, [block.field]: tail } };
    return `event: content_block_delta\ndata: ${JSON.stringify(data)}\n\n`;
  }
}

/** Fields of an OpenAI choice's delta that carry streamed text (`reasoning` as some compatible servers name it). */
const OPENAI_TEXT_FIELDS = ["content", "reasoning_content", "reasoning", "refusal"] as const;

/** A streamed text of one choice: a delta field, or a tool call's arguments. */
type OpenAiChannel = { kind: "field"; field: string; held: HeldTextScrubber } | { kind: "tool"; toolIndex: number; held: HeldTextScrubber };

class OpenAiStreamScrubber implements StreamScrubber {
  readonly #scrubber: SecretScrubber;
  /** By choice index, by `field` or `tool:{index}`. */
  readonly #choices = new Map<number, Map<string, OpenAiChannel>>();
  /** The last chunk's fields other than its choices (id, model, created, …), for the chunks that carry held text. */
  #envelope: Json = { object: "chat.completion.chunk" };

  constructor(scrubber: SecretScrubber) {
    this.#scrubber = scrubber;
  }

  push(event: string): string {
    return this.#scrubber.text(this.#rewrite(event));
  }

  /** The chunk with its streamed texts held back or let go, preceded by chunks of held text it ends. */
  #rewrite(event: string): string {
    const data = sseData(event);
    if (data !== undefined && data.trim() === "[DONE]") return this.#flushAll() + event;
    const chunk = parseEvent(event);
    if (!chunk) return event;
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    // A chunk without choices (the usage chunk) or with an error comes after the texts ended.
    let before = choices.length === 0 || chunk.error !== undefined ? this.#flushAll() : "";
    let changed = false;
    const rewritten = choices.map((choice: unknown) => {
      if (!isObject(choice) || !isObject(choice.delta)) return choice;
      const index = typeof choice.index === "number" ? choice.index : 0;
      const finishing = choice.finish_reason !== null && choice.finish_reason !== undefined;
      const delta: Json = { ...choice.delta };
      const touched = new Set<string>();
      const send = (key: string, make: (held: HeldTextScrubber) => OpenAiChannel, value: string): string => {
        const channel = this.#channel(index, key, make);
        touched.add(key);
        const sent = channel.held.push(value) + (finishing ? channel.held.flush() : "");
        if (sent !== value) changed = true;
        return sent;
      };
      for (const field of OPENAI_TEXT_FIELDS) {
        const value = delta[field];
        if (typeof value === "string") delta[field] = send(field, (held) => ({ kind: "field", field, held }), value);
      }
      if (Array.isArray(delta.tool_calls)) {
        delta.tool_calls = delta.tool_calls.map((call: unknown) => {
          if (!isObject(call) || !isObject(call.function) || typeof call.function.arguments !== "string") return call;
          const toolIndex = typeof call.index === "number" ? call.index : 0;
          const args = send(`tool:${toolIndex}`, (held) => ({ kind: "tool", toolIndex, held }), call.function.arguments);
          return { ...call, function: { ...call.function, arguments: args } };
        });
      }
      if (finishing) {
        // Texts of this choice that did not stream in this chunk end here too: their held
        // text goes in a chunk of its own just before.
        for (const [key, channel] of this.#choices.get(index) ?? []) if (!touched.has(key)) before += this.#held(index, channel, channel.held.flush());
        this.#choices.delete(index);
      }
      return { ...choice, delta };
    });
    if (choices.length > 0) {
      const envelope: Json = { ...chunk };
      delete envelope.choices;
      if ("usage" in envelope) envelope.usage = null;
      this.#envelope = envelope;
    }
    return before + (changed ? withData(event, { ...chunk, choices: rewritten }) : event);
  }

  #channel(index: number, key: string, make: (held: HeldTextScrubber) => OpenAiChannel): OpenAiChannel {
    let channels = this.#choices.get(index);
    if (!channels) {
      channels = new Map();
      this.#choices.set(index, channels);
    }
    let channel = channels.get(key);
    if (!channel) {
      channel = make(this.#scrubber.held());
      channels.set(key, channel);
    }
    return channel;
  }

  #flushAll(): string {
    let out = "";
    for (const [index, channels] of this.#choices) for (const channel of channels.values()) out += this.#held(index, channel, channel.held.flush());
    this.#choices.clear();
    return out;
  }

  /** A chunk carrying a text's last held part, shaped like the upstream's own chunks. */
  #held(index: number, channel: OpenAiChannel, tail: string): string {
    if (tail === "") return "";
    const delta = channel.kind === "field" ? { [channel.field]: tail } : { tool_calls: [{ index: channel.toolIndex, function: { arguments: tail } }] };
    return `data: ${JSON.stringify({ ...this.#envelope, choices: [{ index, delta, finish_reason: null }] })}\n\n`;
  }
}
