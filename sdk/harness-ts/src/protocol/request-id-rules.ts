// What an id a harness chooses may be (harness.proto: PermissionRequest.id
// and call_id, RuntimeToolCall.id). Ids become keys of the runtime's indexes
// and go into its cluster notices, whose sizes the database bounds: a longer
// one could be stored and then never answered. A control character never
// belongs in one: PostgreSQL stores a NUL as U+FFFD, so "x\u0000" and
// "x\uFFFD", two ids to a check in memory, would be one row; an escape
// sequence would reach an operator's terminal.

/** The longest id, in UTF-16 code units (JavaScript's string length). */
export const MAX_REQUEST_ID_CHARS = 256;

/** What is wrong with an id, worded to follow "it has"; undefined when it may be used. */
export function requestIdProblem(id: string): string | undefined {
  if (id.length > MAX_REQUEST_ID_CHARS) return `${id.length} characters, more than ${MAX_REQUEST_ID_CHARS}`;
  for (let i = 0; i < id.length; i++) {
    const code = id.charCodeAt(i);
    if (code < 0x20 || code === 0x7f)
      return `a control character (U+${code.toString(16).toUpperCase().padStart(4, "0")}) in it`;
  }
  return undefined;
}

/** An id as a message names it: quoted, and cut to its first 120 characters and its length when longer. */
export function quotedRequestId(id: string): string {
  return id.length <= 120 ? JSON.stringify(id) : `${JSON.stringify(`${id.slice(0, 120)}…`)} (${id.length} characters)`;
}
