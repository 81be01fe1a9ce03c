// A chat completion chunk that carries only one choice's next piece of text,
// recognised in its text instead of parsed. Nearly every chunk of a stream is
// one, the proxy's meter and scrubber read every chunk, and parsing each was
// the largest part of what a streamed event cost (issue 24). A chunk of
// exactly the shape OpenAI writes (one data line, compact, members in its
// order) is read by one regular expression, which also says where the text's
// string and the `usage: null` the proxy asked for lie, so neither is searched
// for again. Anything else (white space, a member of another kind, a second
// choice, a second text, a finish_reason, a usage that is not null, an
// `error`) is parsed, as every chunk was before. What the expression accepts
// parses to exactly what the reader says: a test holds it to JSON.parse.

/** The fields of a choice's delta that carry streamed text (the scrubber's TEXT_FIELDS). */
export type TextField = "content" | "reasoning_content" | "reasoning" | "refusal";

export interface TextDelta {
  /** The choice's index. */
  index: number;
  field: TextField;
  /** The text, decoded as JSON.parse decodes it. */
  text: string;
  /** Where the text's JSON string starts in the event (its opening quote) and ends (after its closing quote). */
  textStart: number;
  textEnd: number;
  /** Where the top-level `,"usage":null` starts in the event, or -1 when the chunk has no usage. */
  nullUsageAt: number;
}

/** A JSON string: no raw quote, backslash or control character, escapes as JSON defines them. */
const STRING = String.raw`"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"`;
/**
 * A top-level member the meter and scrubber do not read from a text chunk
 * (`id`, `object`, `created`, `model`, `system_fingerprint`, `obfuscation`, …):
 * a string, an integer or null under a plain name. `choices`, `usage` and
 * `error` never: a second one would replace the first when parsed.
 */
const OTHER_MEMBER = String.raw`"(?!(?:choices|usage|error)")[a-z_]+":(?:${STRING}|-?(?:0|[1-9]\d*)|null)`;

const TEXT_CHUNK = new RegExp(
  String.raw`^(data: \{(?:${OTHER_MEMBER},)*"choices":\[\{"index":(0|[1-9]\d{0,8}),"delta":\{"(content|reasoning_content|reasoning|refusal)":)` +
    `(${STRING})` +
    String.raw`(\}(?:,"logprobs":null)?(?:,"finish_reason":null)?\}\])(,"usage":null)?(?:,${OTHER_MEMBER})*\}\n\n$`,
);

const BACKSLASH = "\\";
const UNREAD = Symbol("unread");

/** The last event read and what it read as: the meter and then the scrubber read each event in turn. */
let lastEvent: string | undefined;
let lastDelta: TextDelta | undefined | typeof UNREAD = UNREAD;

/** The event as one choice's text delta, or undefined when it is anything else (then parse it). */
export function readTextDelta(event: string): TextDelta | undefined {
  if (event === lastEvent && lastDelta !== UNREAD) return lastDelta;
  const match = TEXT_CHUNK.exec(event);
  let delta: TextDelta | undefined;
  if (match) {
    const token = match[4]!;
    const textStart = match[1]!.length;
    const textEnd = textStart + token.length;
    delta = {
      index: Number(match[2]),
      field: match[3] as TextField,
      text: token.includes(BACKSLASH) ? (JSON.parse(token) as string) : token.slice(1, -1),
      textStart,
      textEnd,
      nullUsageAt: match[6] === undefined ? -1 : textEnd + match[5]!.length,
    };
  }
  lastEvent = event;
  lastDelta = delta;
  return delta;
}

/**
 * Tells readTextDelta what `event` reads as without reading it: the meter
 * that cut the chunk's `usage: null` (which follows the text, so the text's
 * place is the same) hands the scrubber the cut chunk.
 */
export function rememberTextDelta(event: string, delta: TextDelta): void {
  lastEvent = event;
  lastDelta = delta;
}
