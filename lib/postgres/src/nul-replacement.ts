// PostgreSQL's text cannot hold U+0000: a parameter with it fails its whole
// statement ("invalid byte sequence for encoding UTF8: 0x00"), and jsonb
// refuses the `\u0000` escape ("unsupported Unicode escape sequence").
// What the services store comes from outside (a model's answer, a command's
// output, a harness's stderr), and a NUL in it is ordinary: `cat` of a binary
// file. Refused, the write could only be retried, and failed every time. So a
// NUL is stored as U+FFFD, the replacement character, as a UTF-8 decoder
// stores a byte it cannot read. SQLite stores NUL as it is.
import pg from "pg";

const NUL = "\u0000";
const REPLACEMENT = "\uFFFD";
/**
 * An escape jsonb refuses, in JSON text as JSON.stringify writes it: `\u0000`, or a surrogate's (JSON.stringify
 * escapes one only when it stands alone, and jsonb refuses a lone one). An escape is one preceded by an even
 * number of backslashes: `\\u0000` is text.
 */
const REFUSED_ESCAPE = /(?<!\\)((?:\\\\)*)\\u(?:0000|d[89a-f][0-9a-f]{2})/g;

/** `value` with each U+0000 as U+FFFD: a string, or the strings of an array (pg sends arrays as PostgreSQL arrays). */
export function withoutNul<T>(value: T): T {
  if (typeof value === "string") return (value.includes(NUL) ? value.replaceAll(NUL, REPLACEMENT) : value) as T;
  if (Array.isArray(value) && value.some(hasNul)) return value.map(withoutNul) as T;
  return value;
}

function hasNul(value: unknown): boolean {
  return typeof value === "string" ? value.includes(NUL) : Array.isArray(value) && value.some(hasNul);
}

/**
 * JSON text (as JSON.stringify writes it) as jsonb takes it: each `\u0000` escape, and each of a lone surrogate,
 * as `\ufffd`; the rest unchanged.
 */
export function jsonbText(json: string): string {
  return json.includes("\\u0000") || json.includes("\\ud") ? json.replace(REFUSED_ESCAPE, "$1\\ufffd") : json;
}

type Query = (...args: unknown[]) => unknown;

/**
 * A pg client whose queries send each parameter through {@link withoutNul}:
 * the pool's, so every statement of a service is covered, Kysely's and raw
 * SQL alike. Streams and cursors (a `Submittable`) pass as they are.
 */
export class NulReplacingClient extends pg.Client {}

const query = pg.Client.prototype.query as Query;
(NulReplacingClient.prototype as unknown as { query: Query }).query = function (
  this: pg.Client,
  ...args: unknown[]
): unknown {
  const [first, second] = args;
  if (Array.isArray(second)) args[1] = withoutNul(second);
  else if (isQueryConfig(first) && Array.isArray(first.values))
    args[0] = { ...first, values: withoutNul(first.values) };
  return query.apply(this, args);
};

function isQueryConfig(value: unknown): value is { values?: unknown } {
  return typeof value === "object" && value !== null && typeof (value as { submit?: unknown }).submit !== "function";
}
