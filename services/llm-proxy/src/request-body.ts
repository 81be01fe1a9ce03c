// A model call's request body as the proxy reads and rewrites it. The proxy
// needs a few top-level fields (the model, `stream`, the output limit); the
// conversation, often hundreds of kilobytes, is the provider's to read. So
// the body is not parsed: its top-level members are found by one scan that
// steps over each value (strings by searching for their closing quote), and a
// field is parsed only when asked for. A body whose top level is not one JSON
// object is refused; one malformed deeper down goes to the provider, whose
// error the client gets. Rewritten fields are spliced in, so everything else
// goes upstream byte for byte as the client wrote it.
import type { RequestBody } from "./wire-formats/wire-format.js";

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/** One top-level member: where its value's bytes are, and the value once read. */
interface Member {
  name: string;
  /** Where its name's opening quote is. */
  nameStart: number;
  start: number;
  end: number;
  read?: { value: unknown };
}

function isSpace(byte: number | undefined): boolean {
  return byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09;
}

function skipSpace(raw: Buffer, at: number): number {
  while (isSpace(raw[at])) at += 1;
  return at;
}

/** The index after the string that starts at `at` (its opening quote), or -1 when it never closes. */
function skipString(raw: Buffer, at: number): number {
  let from = at + 1;
  for (;;) {
    const quote = raw.indexOf(QUOTE, from);
    if (quote < 0) return -1;
    let backslashes = 0;
    while (raw[quote - 1 - backslashes] === BACKSLASH) backslashes += 1;
    if (backslashes % 2 === 0) return quote + 1;
    from = quote + 1;
  }
}

/**
 * How deep a body's objects and arrays may nest. The providers refuse far
 * less; the bound is what keeps the scan's own memory fixed: a 32 MiB body of
 * `[` once took a stack of 33 million entries, 650 MB, and the process with it.
 */
export const MAX_BODY_NESTING = 1024;
/** The closer each open bracket waits for, one byte a level, reused by every scan (scans never overlap). */
const closers = new Uint8Array(MAX_BODY_NESTING);

/**
 * The index after the value that starts at `at`, or -1 when it is cut short,
 * its brackets do not pair, or it nests deeper than MAX_BODY_NESTING.
 */
function skipValue(raw: Buffer, at: number): number {
  const first = raw[at];
  if (first === QUOTE) return skipString(raw, at);
  if (first === OPEN_BRACE || first === OPEN_BRACKET) {
    let depth = 0;
    for (let i = at; i < raw.length;) {
      const byte = raw[i]!;
      if (byte === QUOTE) {
        i = skipString(raw, i);
        if (i < 0) return -1;
        continue;
      }
      if (byte === OPEN_BRACE || byte === OPEN_BRACKET) {
        if (depth === MAX_BODY_NESTING) return -1;
        closers[depth++] = byte === OPEN_BRACE ? CLOSE_BRACE : CLOSE_BRACKET;
      } else if (byte === CLOSE_BRACE || byte === CLOSE_BRACKET) {
        if (depth === 0 || closers[--depth] !== byte) return -1;
        if (depth === 0) return i + 1;
      }
      i += 1;
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter (JSON.parse judges it when it is read).
  let i = at;
  while (i < raw.length && raw[i] !== COMMA && raw[i] !== CLOSE_BRACE && raw[i] !== CLOSE_BRACKET && !isSpace(raw[i]))
    i += 1;
  return i > at ? i : -1;
}

/** A JSON string's text (a member's name, a value): its bytes as they are, unless it holds an escape. */
function memberName(raw: Buffer, start: number, end: number): string | undefined {
  for (let i = start + 1; i < end - 1; i += 1) {
    if (raw[i] !== BACKSLASH) continue;
    try {
      return JSON.parse(raw.toString("utf8", start, end)) as string;
    } catch {
      return undefined;
    }
  }
  return raw.toString("utf8", start + 1, end - 1);
}

const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/** A value as JSON.parse reads it, undefined when it is not JSON; the common small ones without JSON.parse. */
function readValue(raw: Buffer, start: number, end: number): unknown {
  const first = raw[start];
  if (first === QUOTE) return memberName(raw, start, end);
  const length = end - start;
  if (length === 4 && first === 0x74 && raw.toString("latin1", start, end) === "true") return true;
  if (length === 5 && first === 0x66 && raw.toString("latin1", start, end) === "false") return false;
  if (length === 4 && first === 0x6e && raw.toString("latin1", start, end) === "null") return null;
  if (length <= 32) {
    const text = raw.toString("latin1", start, end);
    if (JSON_NUMBER.test(text)) return Number(text);
  }
  try {
    return JSON.parse(raw.toString("utf8", start, end));
  } catch {
    return undefined;
  }
}

/** The top-level members of a JSON object, or undefined when the body is not one object. */
function scanMembers(raw: Buffer): Member[] | undefined {
  const members: Member[] = [];
  let i = skipSpace(raw, 0);
  if (raw[i] !== OPEN_BRACE) return undefined;
  i = skipSpace(raw, i + 1);
  if (raw[i] === CLOSE_BRACE) return skipSpace(raw, i + 1) === raw.length ? members : undefined;
  for (;;) {
    if (raw[i] !== QUOTE) return undefined;
    const at = i;
    const nameEnd = skipString(raw, i);
    if (nameEnd < 0) return undefined;
    const name = memberName(raw, i, nameEnd);
    if (name === undefined) return undefined;
    i = skipSpace(raw, nameEnd);
    if (raw[i] !== COLON) return undefined;
    const start = skipSpace(raw, i + 1);
    const end = skipValue(raw, start);
    if (end < 0) return undefined;
    members.push({ name, nameStart: at, start, end });
    i = skipSpace(raw, end);
    if (raw[i] === COMMA) {
      i = skipSpace(raw, i + 1);
      continue;
    }
    if (raw[i] !== CLOSE_BRACE) return undefined;
    return skipSpace(raw, i + 1) === raw.length ? members : undefined;
  }
}

/** An escape of `\u0040` to `\u007f`: letters and `_` are there; `<`, `>` and `&` (which Go escapes) are not. */
const ESCAPED_ASCII_LETTER = /\\u00[4-7]/;
/** Escapes of other characters (a terminal's ESC in a tool's output) searched one by one before the rest goes to the regex. */
const ESCAPES_ONE_BY_ONE = 256;

/**
 * Whether `bytes` hold an escaped ASCII letter. Searched for as `u00`, the
 * search Node's Buffer runs fastest (a few µs over 250 KB of code, where `\`
 * of every `\n` slows a search for `\u00` twentyfold); past a few hundred
 * escapes of other characters, the rest is one regex over its text, bounded
 * at about 1 µs a kilobyte.
 */
function escapesAsciiLetter(bytes: Buffer): boolean {
  let escapes = 0;
  for (let at = bytes.indexOf("u00"); at >= 0; at = bytes.indexOf("u00", at + 3)) {
    if (bytes[at - 1] !== BACKSLASH) continue;
    const high = bytes[at + 3];
    if (high !== undefined && high >= 0x34 && high <= 0x37) return true;
    if (++escapes === ESCAPES_ONE_BY_ONE) return ESCAPED_ASCII_LETTER.test(bytes.toString("latin1", at));
  }
  return false;
}

export class JsonRequestBody implements RequestBody {
  readonly #raw: Buffer;
  readonly #members: Member[];

  private constructor(raw: Buffer, members: Member[]) {
    this.#raw = raw;
    this.#members = members;
  }

  /** The body, or undefined when its top level is not one JSON object (a field read later may still be malformed). */
  static parse(raw: Buffer): JsonRequestBody | undefined {
    const members = scanMembers(raw);
    return members && new JsonRequestBody(raw, members);
  }

  /** A top-level field's value (the last, when a name repeats, as JSON.parse reads it); undefined when absent or malformed. */
  field(name: string): unknown {
    const member = this.#last(name);
    if (!member) return undefined;
    member.read ??= { value: readValue(this.#raw, member.start, member.end) };
    return member.read.value;
  }

  /** Every copy's value of a field whose name repeats, in order (JSON.parse keeps the last; a provider's parser may keep another). */
  values(name: string): unknown[] {
    return this.#members
      .filter((m) => m.name === name)
      .map((member) => {
        member.read ??= { value: readValue(this.#raw, member.start, member.end) };
        return member.read.value;
      });
  }

  /** Whether the bytes of a field (any copy of it) hold `needle` as they are, escapes and all. */
  mentions(name: string, needle: string): boolean {
    return this.#members.some(
      (member) => member.name === name && this.#raw.subarray(member.start, member.end).includes(needle),
    );
  }

  /**
   * Whether a field (any copy of it) writes an ASCII letter as a `\u00XX`
   * escape: then a name or value may be what a search of its bytes for the
   * plain text misses (`"\u0075rl"` is `"url"`). The escapes encoders write
   * (control characters, text beyond ASCII, Go's `<`, `>` and `&`) do not count.
   */
  escapesAscii(name: string): boolean {
    return this.#members.some(
      (member) => member.name === name && escapesAsciiLetter(this.#raw.subarray(member.start, member.end)),
    );
  }

  /**
   * The objects in an array field (in every copy of it), each read a field at
   * a time without parsing the rest; undefined for one that cannot be read as
   * an object. Other elements are left out.
   */
  objectsIn(name: string): (RequestBody | undefined)[] {
    const found: (RequestBody | undefined)[] = [];
    for (const member of this.#members) {
      if (member.name !== name || this.#raw[member.start] !== OPEN_BRACKET) continue;
      let i = skipSpace(this.#raw, member.start + 1);
      while (i < member.end - 1) {
        const end = skipValue(this.#raw, i);
        if (end < 0) break;
        if (this.#raw[i] === OPEN_BRACE) found.push(JsonRequestBody.parse(this.#raw.subarray(i, end)));
        i = skipSpace(this.#raw, end);
        if (this.#raw[i] === COMMA) i = skipSpace(this.#raw, i + 1);
      }
    }
    return found;
  }

  /** The bytes to send: the client's own, or with `changes` set (each field in its place, every copy of a repeated name; a new one last). */
  bytes(changes?: Readonly<Record<string, unknown>>): Buffer {
    const names = changes ? Object.keys(changes) : [];
    if (names.length === 0) return this.#raw;
    const parts: Buffer[] = [];
    let at = 0;
    for (const member of this.#members) {
      if (!names.includes(member.name)) continue;
      parts.push(this.#raw.subarray(at, member.start), Buffer.from(JSON.stringify(changes![member.name])));
      at = member.end;
    }
    const added = names.filter((name) => !this.#last(name));
    if (added.length === 0) {
      parts.push(this.#raw.subarray(at));
      return Buffer.concat(parts);
    }
    // New fields go right after the last member (or the opening brace).
    const last = this.#members.at(-1);
    const insertAt = last ? last.end : this.#raw.indexOf(OPEN_BRACE) + 1;
    const text = added.map((name) => `${JSON.stringify(name)}:${JSON.stringify(changes![name])}`).join(",");
    parts.push(this.#raw.subarray(at, insertAt), Buffer.from(last ? `,${text}` : text), this.#raw.subarray(insertAt));
    return Buffer.concat(parts);
  }

  /**
   * The bytes without every member named `name`, each taken out with its
   * comma; everything else as it was (an OpenAI chunk loses the `usage` the
   * proxy asked for, without being parsed and written again).
   */
  without(name: string): Buffer {
    const members = this.#members;
    if (!members.some((m) => m.name === name)) return this.#raw;
    const parts: Buffer[] = [this.#raw.subarray(0, members[0]!.nameStart)];
    let first = true;
    members.forEach((member, i) => {
      if (member.name === name) return;
      // Each member kept after another keeps the comma and white space that stood before it.
      if (!first) parts.push(this.#raw.subarray(members[i - 1]!.end, member.nameStart));
      parts.push(this.#raw.subarray(member.nameStart, member.end));
      first = false;
    });
    parts.push(this.#raw.subarray(members.at(-1)!.end));
    return Buffer.concat(parts);
  }

  #last(name: string): Member | undefined {
    for (let i = this.#members.length - 1; i >= 0; i -= 1) if (this.#members[i]!.name === name) return this.#members[i];
    return undefined;
  }
}
