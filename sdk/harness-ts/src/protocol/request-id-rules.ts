// What an id a harness chooses may be (harness.proto: PermissionRequest.id
// and call_id, RuntimeToolCall.id). Ids become keys of the runtime's indexes
// and go into its cluster notices, whose sizes the database bounds: a longer
// one could be stored and then never answered. A control character never
// belongs in one: PostgreSQL stores a NUL as U+FFFD, so "x\u0000" and
// "x\uFFFD", two ids to a check in memory, would be one row; an escape
// sequence would reach an operator's terminal. Nor does half a character.

/** The longest id, in UTF-16 code units (JavaScript's string length). */
export const MAX_REQUEST_ID_CHARS = 256;

/** The rules in a few words, for the message that refuses an id ("ids are …"). */
export const REQUEST_ID_RULES = `at most ${MAX_REQUEST_ID_CHARS} characters, with no control characters, line or paragraph separators, bidirectional controls or half characters`;

/**
 * The characters no id may hold, each kind in the words of REQUEST_ID_RULES: C0 and C1 controls and DEL (a
 * terminal acts on them), the line and paragraph separators (a log line ends at them), and the bidirectional
 * controls, Unicode's Bidi_Control: embeddings, overrides, isolates and the marks (an id shown reversed is not
 * the one asked about). The one list both the id check and escapeRefusedCharacters read.
 */
const REFUSED_KINDS = [
  { kind: "a control character", ranges: "\\u0000-\\u001f\\u007f-\\u009f" },
  { kind: "a line separator", ranges: "\\u2028" },
  { kind: "a paragraph separator", ranges: "\\u2029" },
  { kind: "a bidirectional control", ranges: "\\u061c\\u200e\\u200f\\u202a-\\u202e\\u2066-\\u2069" },
].map(({ kind, ranges }) => ({ kind, ranges, pattern: new RegExp(`[${ranges}]`) }));

/** What kind of character no id may hold `c` is; undefined for any other. */
function refusedCharacter(c: string): string | undefined {
  return REFUSED_KINDS.find((k) => k.pattern.test(c))?.kind;
}

/** What is wrong with an id, worded to follow "it has"; undefined when it may be used. */
export function requestIdProblem(id: string): string | undefined {
  if (id.length > MAX_REQUEST_ID_CHARS) return `${id.length} characters, more than ${MAX_REQUEST_ID_CHARS}`;
  for (let i = 0; i < id.length; i++) {
    const code = id.charCodeAt(i);
    const refused = refusedCharacter(id[i]!);
    if (refused) return `${refused} (U+${code.toString(16).toUpperCase().padStart(4, "0")}) in it`;
    // Half of a character (a surrogate alone, as a slice through an emoji leaves it): on the wire, in UTF-8, it
    // becomes U+FFFD, and the answer would name an id the harness never used.
    if (code >= 0xd800 && code <= 0xdfff) {
      const next = id.charCodeAt(i + 1);
      if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) i++;
      else return `half of a character (U+${code.toString(16).toUpperCase()}, a surrogate alone) in it`;
    }
  }
  return undefined;
}

/** Every character no id may hold, as one character class's ranges. */
const REFUSED_RANGES = REFUSED_KINDS.map((k) => k.ranges).join("");
/** A surrogate with no other half beside it. */
const HALF_CHARACTER = "[\\ud800-\\udbff](?![\\udc00-\\udfff])|(?<![\\ud800-\\udbff])[\\udc00-\\udfff]";
/** What escapeRefusedCharacters escapes: every character no id may hold, and half characters. */
const REFUSED_OR_HALF = new RegExp(`[${REFUSED_RANGES}]|${HALF_CHARACTER}`, "g");
/** The same but for line feeds, tabs and the carriage return of a CRLF (keepLinesAndTabs). */
const REFUSED_OR_HALF_BUT_LINES = new RegExp(`\\r(?!\\n)|(?![\\t\\n\\r])[${REFUSED_RANGES}]|${HALF_CHARACTER}`, "g");

/**
 * `text` with every character no id may hold, and every half character, written as a `\uXXXX` escape
 * (as JSON writes a control character): harness text that a message names then stays inert in a log line,
 * an operator's terminal or the console, whatever the harness put in it. Valid JSON stays valid JSON.
 * `keepLinesAndTabs` keeps line feeds, tabs and the carriage return of a CRLF, for text printed as lines
 * (a lone carriage return would let a line be written over).
 */
export function escapeRefusedCharacters(text: string, options: { keepLinesAndTabs?: boolean } = {}): string {
  return text.replace(
    options.keepLinesAndTabs ? REFUSED_OR_HALF_BUT_LINES : REFUSED_OR_HALF,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

/**
 * An id as a message names it: quoted, and cut to its first 120 characters and its length when longer. The
 * host's failure messages, where it goes, are made inert as a whole (escapeRefusedCharacters).
 */
export function quotedRequestId(id: string): string {
  return id.length <= 120 ? JSON.stringify(id) : `${JSON.stringify(`${id.slice(0, 120)}…`)} (${id.length} characters)`;
}
