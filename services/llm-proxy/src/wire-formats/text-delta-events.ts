// Stream events that carry only the next piece of one streamed text,
// recognised in their text instead of parsed. Nearly every event of a stream
// is one, the proxy's meter and scrubber read every event, and parsing each
// was the largest part of what a streamed event cost (issue 24). An event of
// exactly the shape its provider writes (one data line, compact, members in
// the provider's order) is read by one regular expression, which also says
// where the text's string lies, so it is never searched for again. Anything
// else (white space, a member of another kind, a second text, a finish
// reason, an error) is parsed, as every event was before. What an expression
// accepts parses to exactly what its reader says: a test holds each to
// JSON.parse, on the providers' events and on events cut and spliced at random.
import type { TextSpan } from "@oz0/serving";
import { rememberingLast } from "./sse-json.js";

/** Where a text's JSON string lies in its event. */
interface TextPlace {
  /** Its opening quote. */
  textStart: number;
  /** Just after its closing quote. */
  textEnd: number;
  /** The text, decoded as JSON.parse decodes it. */
  text: string;
}

/** A JSON string: no raw quote, backslash or control character, escapes as JSON defines them. */
const STRING = String.raw`"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"`;
/** A JSON integer that is a safe index. */
const INDEX = String.raw`(0|[1-9]\d{0,8})`;

/**
 * A member none of the readers below reads: a string, an integer, null or an
 * empty array under a plain name that is none of `names` (a second one of
 * those would replace the first when parsed).
 */
function otherMember(names: readonly string[]): string {
  return String.raw`"(?!(?:${names.join("|")})")[a-z_]+":(?:${STRING}|-?(?:0|[1-9]\d*)|null|\[\])`;
}

const BACKSLASH = "\\";

/** The text of the JSON string `token`, which the expression matched as one. */
function decode(token: string): string {
  return token.includes(BACKSLASH) ? (JSON.parse(token) as string) : token.slice(1, -1);
}

/** A place for `token` found at `textStart`. */
function placeOf(token: string, textStart: number): TextPlace {
  return { textStart, textEnd: textStart + token.length, text: decode(token) };
}

/**
 * An event that carries one streamed text, where that text's JSON string begins in it, and its
 * counter when it has one; where the string ends when its text was sent plain (`HeldTextScrubber.sentPlain`).
 */
export interface TextEvent {
  event: string;
  textStart: number;
  counter?: TextSpan | undefined;
  plainTextEnd?: number | undefined;
}

/** Where a text's JSON string lies in its event, and the event's counter when it has one. */
export type TextPlacement = Pick<TextPlace, "textStart" | "textEnd"> & { counter?: TextSpan | undefined };

/**
 * The event carrying `sent` in place of its text `came`, whose JSON string
 * lies at `place`: the event as it came when the two are the same. Only the
 * string changes, so the counter stays where it was. `plain`: the text was
 * sent plain, so the string's end is told.
 */
export function withSentText(
  event: string,
  place: TextPlacement,
  text: { came: string; sent: string; plain: boolean },
): TextEvent {
  const { textStart, textEnd, counter } = place;
  if (text.sent === text.came) return { event, textStart, counter, plainTextEnd: text.plain ? textEnd : undefined };
  const string = JSON.stringify(text.sent);
  return {
    event: event.slice(0, textStart) + string + event.slice(textEnd),
    textStart,
    counter,
    plainTextEnd: text.plain ? textStart + string.length : undefined,
  };
}

/** What a split expression matched: the event's head, and its text's string with what follows. */
interface SplitMatch {
  head: RegExpExecArray;
  /** Where the head ends: the text's opening quote. */
  headEnd: number;
  /** Where the head's counter lies, when it has one. */
  counter: TextSpan | undefined;
  rest: RegExpExecArray;
}

/** A head matched, remembered to be recognised in the events after it. */
interface RememberedHead {
  match: RegExpExecArray;
  /** The head up to its counter (all of it without one), and after its counter. */
  beforeCounter: string;
  afterCounter: string | undefined;
}

const DIGIT_0 = 0x30;
const DIGIT_9 = 0x39;
/** The longest counter read without the expression: 16 digits (a safe integer's). */
const COUNTER_DIGITS = 16;

/**
 * An expression for a delta event in two parts: `head`, from the event's
 * start up to its text's opening quote, then `rest` (sticky), from there to
 * the event's end. The delta events of one stream mostly repeat their head
 * (for Chat Completions and Anthropic all of it: the id, the model, the
 * indexes), and matching it again was most of what reading an event cost
 * (issue 24), so an event that begins with the last head matched is matched
 * from its string on only. A head's expression decides where it ends by the
 * characters it reads (it ends at the one member that holds the text, which
 * no member before it can be), so a repeated head matches as it did.
 *
 * A head may hold a counter (Responses numbers every event): the capture
 * group `counterGroup` of the head's expression, an integer. An event that
 * repeats the last head but for another integer there (digits, without a
 * leading zero, as the group takes them) matches as the last did, the
 * integer being the only part of it that differs.
 */
class SplitExpression {
  readonly #head: RegExp;
  readonly #rest: RegExp;
  readonly #counterGroup: number | undefined;
  #last: RememberedHead | undefined;

  constructor(head: string, rest: string, options: { counterGroup?: number } = {}) {
    this.#counterGroup = options.counterGroup;
    this.#head = new RegExp(`^${head}`, options.counterGroup === undefined ? "" : "d");
    this.#rest = new RegExp(`${rest}$`, "y");
  }

  exec(event: string): SplitMatch | undefined {
    let head: RegExpExecArray;
    let headEnd: number;
    let counter: TextSpan | undefined;
    const last = this.#last;
    const repeatedEnd = last === undefined ? -1 : repeatedHeadEnd(event, last);
    if (last !== undefined && repeatedEnd >= 0) {
      const { match, beforeCounter, afterCounter } = last;
      head = match;
      headEnd = repeatedEnd;
      if (afterCounter !== undefined) counter = { start: beforeCounter.length, end: headEnd - afterCounter.length };
    } else {
      const match = this.#head.exec(event);
      if (match === null) return undefined;
      head = match;
      headEnd = match[0].length;
      const span = this.#counterGroup === undefined ? undefined : match.indices?.[this.#counterGroup];
      if (span !== undefined) counter = { start: span[0], end: span[1] };
      this.#last = counter
        ? { match, beforeCounter: match[0].slice(0, counter.start), afterCounter: match[0].slice(counter.end) }
        : { match, beforeCounter: match[0], afterCounter: undefined };
    }
    this.#rest.lastIndex = headEnd;
    const rest = this.#rest.exec(event);
    return rest ? { head, headEnd, counter, rest } : undefined;
  }
}

/** Where the remembered head ends in `event` when the event begins with it (its counter aside), else -1. */
function repeatedHeadEnd(event: string, { beforeCounter, afterCounter }: RememberedHead): number {
  // Compared as slices: V8's startsWith reads a character at a time, several times slower.
  if (event.slice(0, beforeCounter.length) !== beforeCounter) return -1;
  if (afterCounter === undefined) return beforeCounter.length;
  const start = beforeCounter.length;
  let end = start;
  while (end - start < COUNTER_DIGITS) {
    const c = event.charCodeAt(end);
    if (c < DIGIT_0 || c > DIGIT_9) break;
    end += 1;
  }
  if (end === start || (end - start > 1 && event.charCodeAt(start) === DIGIT_0)) return -1;
  return event.slice(end, end + afterCounter.length) === afterCounter ? end + afterCounter.length : -1;
}

// OpenAI Chat Completions

/** The fields of a choice's delta that carry streamed text (`reasoning` as some compatible servers name it). */
export const CHAT_TEXT_FIELDS = ["content", "reasoning_content", "reasoning", "refusal"] as const;
export type ChatTextField = (typeof CHAT_TEXT_FIELDS)[number];

export interface ChatTextDelta extends TextPlace {
  /** The choice's index. */
  index: number;
  field: ChatTextField;
  /** Where the top-level `,"usage":null` starts in the event, or -1 when the chunk has no usage. */
  nullUsageAt: number;
}

/** Members of a chunk around its choices (`id`, `object`, `created`, `model`, `system_fingerprint`, `obfuscation`, …). */
const CHUNK_MEMBER = otherMember(["choices", "usage", "error"]);

const CHAT_TEXT_CHUNK = new SplitExpression(
  String.raw`data: \{(?:${CHUNK_MEMBER},)*"choices":\[\{"index":${INDEX},"delta":\{"(${CHAT_TEXT_FIELDS.join("|")})":`,
  `(${STRING})` +
    String.raw`(\}(?:,"logprobs":null)?(?:,"finish_reason":null)?\}\])(,"usage":null)?(?:,${CHUNK_MEMBER})*\}\n\n`,
);

const chatText = rememberingLast((event): ChatTextDelta | undefined => {
  const match = CHAT_TEXT_CHUNK.exec(event);
  if (!match) return undefined;
  const { head, headEnd, rest } = match;
  const place = placeOf(rest[1]!, headEnd);
  return {
    ...place,
    index: Number(head[1]),
    field: head[2] as ChatTextField,
    nullUsageAt: rest[3] === undefined ? -1 : place.textEnd + rest[2]!.length,
  };
});

/**
 * A chat completion chunk as one choice's next text (no finish_reason, no
 * usage but a null one), or undefined when it is anything else (parse it).
 */
export function readChatTextDelta(event: string): ChatTextDelta | undefined {
  return chatText.read(event);
}

/**
 * Tells readChatTextDelta what `event` reads as without reading it: the meter
 * that cut a chunk's `usage: null` (which follows the text, so the text's
 * place is the same) hands the scrubber the cut chunk.
 */
export function rememberChatTextDelta(event: string, delta: ChatTextDelta): void {
  chatText.remember(event, delta);
}

// Anthropic Messages

/** Which member of each Anthropic delta type carries streamed text. */
export const ANTHROPIC_TEXT_FIELDS = {
  text_delta: "text",
  input_json_delta: "partial_json",
  thinking_delta: "thinking",
} as const;
type AnthropicDeltaType = keyof typeof ANTHROPIC_TEXT_FIELDS;

export interface AnthropicTextDelta extends TextPlace {
  /** The content block's index. */
  index: number;
  /** The delta's type and the member holding its text. */
  type: AnthropicDeltaType;
  field: (typeof ANTHROPIC_TEXT_FIELDS)[AnthropicDeltaType];
}

const ANTHROPIC_TEXT_DELTA = new SplitExpression(
  String.raw`(?:event: content_block_delta\n)?data: \{"type":"content_block_delta","index":${INDEX},"delta":\{"type":"(${Object.keys(ANTHROPIC_TEXT_FIELDS).join("|")})","(${Object.values(ANTHROPIC_TEXT_FIELDS).join("|")})":`,
  String.raw`(${STRING})\}\}\n\n`,
);

const anthropicText = rememberingLast((event): AnthropicTextDelta | undefined => {
  const match = ANTHROPIC_TEXT_DELTA.exec(event);
  const type = match?.head[2] as AnthropicDeltaType | undefined;
  if (!match || ANTHROPIC_TEXT_FIELDS[type!] !== match.head[3]) return undefined;
  const { head, headEnd, rest } = match;
  return {
    ...placeOf(rest[1]!, headEnd),
    index: Number(head[1]),
    type: type!,
    field: head[3] as AnthropicTextDelta["field"],
  };
});

/** A `content_block_delta` of one block's text, tool input or thinking, or undefined when it is anything else. */
export function readAnthropicTextDelta(event: string): AnthropicTextDelta | undefined {
  return anthropicText.read(event);
}

// OpenAI Responses

export interface ResponsesTextDelta extends TextPlace {
  /** The event's type (`response.output_text.delta`, …): the caller checks it streams text. */
  type: string;
  outputIndex: number;
  /** Its `content_index` or `summary_index`, when it has one. */
  partIndex: number | undefined;
  /**
   * Where a `sequence_number` right after the type lies, as OpenAI writes it
   * (a second one later in the event is the one a parse keeps: this span is
   * for reading the event again, not for its number).
   */
  counter: TextSpan | undefined;
}

/** Members of a delta event besides its type, indexes and delta (`sequence_number`, `item_id`, `logprobs: []`, `obfuscation`). */
const RESPONSES_MEMBER = otherMember(["type", "delta", "output_index", "content_index", "summary_index"]);

const RESPONSES_TEXT_DELTA = new SplitExpression(
  String.raw`(?:event: [a-z_.]+\n)?data: \{"type":"([a-z_.]+\.delta)"(?:,"sequence_number":(0|[1-9]\d{0,15}))?(?:,${RESPONSES_MEMBER})*,"output_index":${INDEX}(?:,"(?:content_index|summary_index)":${INDEX})?(?:,${RESPONSES_MEMBER})*,"delta":`,
  String.raw`(${STRING})(?:,${RESPONSES_MEMBER})*\}\n\n`,
  { counterGroup: 2 },
);

const responsesText = rememberingLast((event): ResponsesTextDelta | undefined => {
  const match = RESPONSES_TEXT_DELTA.exec(event);
  if (!match) return undefined;
  const { head, headEnd, counter, rest } = match;
  return {
    ...placeOf(rest[1]!, headEnd),
    type: head[1]!,
    outputIndex: Number(head[3]),
    partIndex: head[4] === undefined ? undefined : Number(head[4]),
    counter,
  };
});

/**
 * A Responses stream event of a `….delta` type whose `delta` is a string,
 * with its indexes, or undefined when it is anything else. Whether its type
 * streams text is the caller's to say. (Only a delta's type is tried: the
 * events that repeat a whole text, read as far as their text before failing,
 * cost the expression several microseconds each.)
 */
export function readResponsesTextDelta(event: string): ResponsesTextDelta | undefined {
  return responsesText.read(event);
}
