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
export const REQUEST_ID_RULES = `at most ${MAX_REQUEST_ID_CHARS} characters, with no control characters`;

/**
 * Characters no id may hold: C0 and C1 controls and DEL (a terminal acts on them), the line and paragraph
 * separators, and the bidirectional overrides and isolates (an id shown reversed is not the one asked about).
 */
function isRefusedCharacter(code: number): boolean {
  return (
    code < 0x20 ||
    (code >= 0x7f && code <= 0x9f) ||
    code === 0x2028 ||
    code === 0x2029 ||
    (code >= 0x202a && code <= 0x202e) ||
    (code >= 0x2066 && code <= 0x2069)
  );
}

/** What is wrong with an id, worded to follow "it has"; undefined when it may be used. */
export function requestIdProblem(id: string): string | undefined {
  if (id.length > MAX_REQUEST_ID_CHARS) return `${id.length} characters, more than ${MAX_REQUEST_ID_CHARS}`;
  for (let i = 0; i < id.length; i++) {
    const code = id.charCodeAt(i);
    if (isRefusedCharacter(code))
      return `a control character (U+${code.toString(16).toUpperCase().padStart(4, "0")}) in it`;
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

/** An id as a message names it: quoted, and cut to its first 120 characters and its length when longer. */
export function quotedRequestId(id: string): string {
  return id.length <= 120 ? JSON.stringify(id) : `${JSON.stringify(`${id.slice(0, 120)}…`)} (${id.length} characters)`;
}
