// Removes a secret (a provider key at the LLM proxy, a session token in a
// harness's stderr at the sandbox), and any run of 8 or more of its
// characters, from text on its way out. Provider error bodies echo key
// prefixes or suffixes; a model that saw a key may repeat it whole, token by
// token across streamed deltas, or spelled out with spaces between its
// characters. So a run is read through white space (and zero-width
// characters) between the key's characters, and a streamed text is read
// across its deltas: each delta's text is held back from the run of key
// characters it ends with until the next delta shows whether the run grows
// to 8 (see HeldTextScrubber).

import { KeyAutomaton, type KeyMatch } from "./key-automaton.js";

/** Runs this long or longer are scrubbed; shorter ones are too common to mean anything. */
const MIN_FRAGMENT = 8;
/**
 * At most this many white-space characters between two characters of a run;
 * a longer gap ends it. Bounds what a stream holds back (the key's length
 * times this, in the worst case) while no spacing a text would use hides a key.
 */
const MAX_GAP = 32;
export const REDACTED = "[redacted]";

/** White space as `\s` reads it, and the zero-width characters that print as nothing. */
function isGap(code: number): boolean {
  if (code <= 0x20) return code === 0x20 || (code >= 0x09 && code <= 0x0d);
  if (code < 0x85) return false;
  return (
    code === 0x85 ||
    code === 0xa0 ||
    code === 0x1680 ||
    (code >= 0x2000 && code <= 0x200d) ||
    code === 0x2028 ||
    code === 0x2029 ||
    code === 0x202f ||
    code === 0x205f ||
    code === 0x2060 ||
    code === 0x3000 ||
    code === 0xfeff
  );
}

/** What one reading of a text found. Indexes into the arrays count only the text's non-gap characters. */
interface Scan {
  /** Where each non-gap character starts in the text, and where it ends (an escape is several). */
  starts: Int32Array;
  ends: Int32Array;
  /** How many non-gap characters the text has. */
  count: number;
  /** 1 for each non-gap character inside a run of 8 or more key characters. */
  covered: Uint8Array;
  /** 1 for each non-gap character after a gap longer than MAX_GAP (a run cannot cross it). */
  broken: Uint8Array;
  /** The longest run of key characters the text ends with (0 after a gap longer than MAX_GAP). */
  tail: number;
  /** True when anything is covered. */
  found: boolean;
  /** Where an escape cut off by the end of the text begins (streamed text only). */
  incomplete: number | undefined;
}

const BACKSLASH = 0x5c;
const QUOTE = 0x22;
const SIMPLE_ESCAPES: Readonly<Record<string, number>> = {
  n: 0x0a,
  r: 0x0d,
  t: 0x09,
  f: 0x0c,
  b: 0x08,
  '"': 0x22,
  "\\": BACKSLASH,
  "/": 0x2f,
};

/**
 * The character a JSON escape at `at` stands for and where it ends; null when
 * the text ends inside it; undefined when the backslash starts no escape.
 * Tool-call arguments and partial JSON are JSON text, and a model writing a
 * key into a JSON string may escape its white space (or its letters).
 */
function readEscape(text: string, at: number): { code: number; end: number } | null | undefined {
  if (at + 1 >= text.length) return null;
  const letter = text[at + 1]!;
  const simple = SIMPLE_ESCAPES[letter];
  if (simple !== undefined) return { code: simple, end: at + 2 };
  if (letter !== "u") return undefined;
  const hex = text.slice(at + 2, at + 6);
  if (!/^[0-9a-fA-F]*$/.test(hex)) return undefined;
  if (hex.length < 4) return null;
  return { code: Number.parseInt(hex, 16), end: at + 6 };
}

/**
 * The character at `at`, a JSON escape read as the character it stands for
 * (a backslash that starts none, or whose escape the text cuts off, as
 * itself): its code times 8 plus how many of the text's characters it
 * takes (1, 2 or 6), one number so the loops that read a character each
 * allocate nothing.
 */
function readCharacter(text: string, at: number): number {
  const code = text.charCodeAt(at);
  if (code !== BACKSLASH) return code * 8 + 1;
  const escape = readEscape(text, at);
  return escape ? escape.code * 8 + (escape.end - at) : code * 8 + 1;
}

/** Readings back at their start: a gap longer than MAX_GAP ends every run. */
function restart(matches: readonly KeyMatch[]): void {
  for (const match of matches) {
    match.state = 0;
    match.length = 0;
  }
}

/**
 * Buffers every scan writes into, grown as needed. A scan's result is read
 * before the next scan starts (scans are synchronous and never nested), and
 * what outlives it is copied, so one set serves the whole process: a scan
 * per streamed event allocates nothing.
 */
let buffers = {
  starts: new Int32Array(1024),
  ends: new Int32Array(1024),
  covered: new Uint8Array(1024),
  broken: new Uint8Array(1024),
};

function scan(options: {
  text: string;
  automata: readonly KeyAutomaton[];
  carried?: Uint8Array | undefined;
  streaming: boolean;
}): Scan {
  const { text, automata, carried } = options;
  if (buffers.starts.length < text.length) {
    const size = Math.max(text.length, buffers.starts.length * 2);
    buffers = {
      starts: new Int32Array(size),
      ends: new Int32Array(size),
      covered: new Uint8Array(size),
      broken: new Uint8Array(size),
    };
  }
  const { starts, ends, covered, broken } = buffers;
  covered.fill(0, 0, text.length);
  broken.fill(0, 0, text.length);
  let found = false;
  if (carried) {
    covered.set(carried.subarray(0, Math.min(carried.length, text.length)));
    found = carried.includes(1);
  }
  const matches: KeyMatch[] = automata.map(() => ({ state: 0, length: 0 }));
  // Per key, the highest index already covered: runs ending later never start earlier
  // (a run ending one character later is at most one longer), so each character is marked once.
  const coveredTo = automata.map(() => -1);
  let count = 0;
  let gap = 0;
  let incomplete: number | undefined;
  for (let i = 0; i < text.length;) {
    let code = text.charCodeAt(i);
    let next = i + 1;
    if (code === BACKSLASH) {
      const escape = readEscape(text, i);
      if (escape === null && options.streaming) {
        // The rest of the escape comes with the next delta: decide nothing from here on.
        incomplete = i;
        break;
      }
      if (escape) {
        code = escape.code;
        next = escape.end;
      }
    }
    if (isGap(code)) {
      gap += 1;
      if (gap === MAX_GAP + 1) restart(matches);
      i = next;
      continue;
    }
    const k = count;
    starts[k] = i;
    ends[k] = next;
    if (gap > MAX_GAP) broken[k] = 1;
    gap = 0;
    count += 1;
    for (let s = 0; s < automata.length; s += 1) {
      const match = matches[s]!;
      automata[s]!.step(match, code);
      if (match.length < MIN_FRAGMENT) continue;
      for (let j = Math.max(k - match.length + 1, coveredTo[s]! + 1); j <= k; j += 1) covered[j] = 1;
      coveredTo[s] = k;
      found = true;
    }
    i = next;
  }
  let tail = 0;
  for (const match of matches) tail = Math.max(tail, match.length);
  return { starts, ends, count, covered, broken, tail, found, incomplete };
}

/**
 * The pairs of neighbouring characters in any of the secrets, a flag per
 * pair of their low bytes (two pairs that share low bytes share a flag).
 */
function neighbourPairs(secrets: readonly string[]): Uint8Array {
  const pairs = new Uint8Array(1 << 16);
  for (const secret of secrets) {
    for (let i = 1; i < secret.length; i += 1) {
      pairs[((secret.charCodeAt(i - 1) & 0xff) << 8) | (secret.charCodeAt(i) & 0xff)] = 1;
    }
  }
  return pairs;
}

const NO_PAIRS = new Uint8Array(0);

/**
 * -1 when the text may hold a run of 8 or more key characters; otherwise
 * where the trailing run of neighbouring key pairs begins (the text's length
 * when it has no character but white space), before which no run of key
 * characters can reach the text's end. A run is 7 neighbouring pairs in a
 * row that are all pairs of a secret, read through white space and escapes
 * as the scan reads them. A key's hundred or so pairs are a few of the
 * thousands a text's characters form, so an ordinary text fails within a
 * character or two of every start, and this loop (a table lookup per
 * character) is what most streamed events cost instead of the automaton's
 * steps (issue 24). Pairs that share their low bytes, and a gap long enough
 * to end a run, only make it answer -1 more often, or the trailing run
 * start earlier: the scan then decides.
 */
function trailingPairRun(text: string, pairs: Uint8Array): number {
  let previous = -1;
  let run = 0;
  let runStart = text.length;
  for (let i = 0; i < text.length;) {
    const at = i;
    let code = text.charCodeAt(i);
    if (code === BACKSLASH) {
      const read = readCharacter(text, i);
      code = read >>> 3;
      i += read & 7;
    } else {
      i += 1;
    }
    if (isGap(code)) continue;
    if (previous >= 0 && pairs[((previous & 0xff) << 8) | (code & 0xff)] === 1) {
      run += 1;
      if (run === MIN_FRAGMENT - 1) return -1;
    } else {
      run = 0;
      runStart = at;
    }
    previous = code;
  }
  return runStart;
}

/**
 * True when the text holds a run of 8 or more key characters: the scan
 * without its bookkeeping, since nearly every text scrubbed holds none.
 */
function holdsRun(text: string, automata: readonly KeyAutomaton[]): boolean {
  const matches: KeyMatch[] = automata.map(() => ({ state: 0, length: 0 }));
  let gap = 0;
  for (let i = 0; i < text.length;) {
    const read = readCharacter(text, i);
    const code = read >>> 3;
    i += read & 7;
    if (isGap(code)) {
      gap += 1;
      if (gap === MAX_GAP + 1) restart(matches);
      continue;
    }
    gap = 0;
    for (let s = 0; s < automata.length; s += 1) {
      const match = matches[s]!;
      automata[s]!.step(match, code);
      if (match.length >= MIN_FRAGMENT) return true;
    }
  }
  return false;
}

/**
 * The text up to `end` with each covered run, and the white space inside it,
 * replaced by one marker. `afterCovered`: the character just before the text
 * (already sent) was covered, so a run continuing here needs no second marker.
 */
function render(options: { text: string; found: Scan; end: number; afterCovered: boolean }): string {
  const { text, found, end } = options;
  let out = "";
  let previousCovered = options.afterCovered;
  let gapStart = 0;
  for (let k = 0; k < found.count; k += 1) {
    const at = found.starts[k]!;
    if (at >= end) break;
    const gap = text.slice(gapStart, at);
    if (found.covered[k] === 1) {
      // The white space between two characters of one run goes with it.
      if (!previousCovered || found.broken[k] === 1) out += gap + REDACTED;
      previousCovered = true;
    } else {
      out += gap + text.slice(at, found.ends[k]);
      previousCovered = false;
    }
    gapStart = found.ends[k]!;
  }
  return out + text.slice(gapStart, end);
}

/**
 * One streamed text (an Anthropic content block's deltas, an OpenAI choice's
 * content): what `push` returns is final, and never the start of a key run
 * that a later delta could complete; that tail waits for the next delta or
 * for `flush` (the text's end). A text that ends in no character of a key
 * passes at once; otherwise only the run it ends with waits (fewer than 8
 * characters, unless a key is being sent).
 */
export class HeldTextScrubber {
  readonly #automata: readonly KeyAutomaton[];
  readonly #pairs: Uint8Array;
  /** Where the characters of a text's trailing run start, and a reading per key: reused by every delta. */
  readonly #trailingStarts = new Int32Array(MIN_FRAGMENT - 1);
  readonly #matches: KeyMatch[];
  /** What the last push sent was plain (see `sentPlain`). */
  #sentPlain = false;
  /** Received, not yet sent: starts right after the last character sent. */
  #held = "";
  /** Covered flags of the held non-gap characters, from the scans that saw their run. */
  #carried: Uint8Array | undefined;
  /** The last character sent was covered, with nothing sent after it. */
  #afterCovered = false;

  constructor(options: { automata: readonly KeyAutomaton[]; pairs: Uint8Array }) {
    this.#automata = options.automata;
    this.#pairs = options.pairs;
    this.#matches = options.automata.map(() => ({ state: 0, length: 0 }));
  }

  /** The part of the text so far that can be sent now, scrubbed. */
  push(delta: string): string {
    if (this.#automata.length === 0) return delta;
    const text = this.#held + delta;
    if (this.#carried === undefined && !text.includes("\\")) {
      const end = this.#cleanEnd(text);
      if (end >= 0) {
        this.#held = text.slice(end);
        // Nothing sent leaves the last character sent where it was (a run it ended may go on).
        if (end > 0) this.#afterCovered = false;
        this.#sentPlain = true;
        return text.slice(0, end);
      }
    }
    this.#sentPlain = false;
    const found = scan({ text, automata: this.#automata, carried: this.#carried, streaming: true });
    const holdFrom = found.count - found.tail;
    const end =
      holdFrom === found.count ? (found.incomplete ?? text.length) : holdFrom === 0 ? 0 : found.ends[holdFrom - 1]!;
    const out = this.#send({ text, found, end, sentCount: holdFrom });
    this.#held = text.slice(end);
    // Flags only when a held character is covered: no flags and flags all 0 scan alike.
    this.#carried =
      found.found && found.covered.subarray(holdFrom, found.count).includes(1)
        ? found.covered.slice(holdFrom, found.count)
        : undefined;
    return out;
  }

  /**
   * Whether what the last `push` returned holds no run of key characters and
   * no backslash: written as a JSON string, a scan of that string (which
   * reads one level of escapes) reads exactly its characters, and finds no
   * run in it either (FramedTextScrubber's `plainTextEnd`).
   */
  get sentPlain(): boolean {
    return this.#sentPlain;
  }

  /**
   * Where the text's part that can go now ends, when the text holds no run
   * of 8 (else -1, and the whole scan decides): only its trailing run of
   * neighbouring key pairs can be the start of one, so only that is read by
   * the automata, for the run of key characters the text ends with. Nearly
   * every delta is one, and scanning all of it, held part and all, was the
   * largest part of what a streamed event's scrub cost (issue 24). Only for
   * a text without a backslash: each character is itself, so white space
   * before the trailing run is found by reading backwards.
   */
  #cleanEnd(text: string): number {
    const from = trailingPairRun(text, this.#pairs);
    if (from < 0) return -1;
    // The trailing run is at most 7 characters (7 pairs would be 8): read without a scan's bookkeeping.
    const matches = this.#matches;
    restart(matches);
    const starts = this.#trailingStarts;
    let count = 0;
    let gap = 0;
    for (let i = from; i < text.length; i += 1) {
      const code = text.charCodeAt(i);
      if (isGap(code)) {
        gap += 1;
        if (gap === MAX_GAP + 1) restart(matches);
        continue;
      }
      if (count === starts.length) return -1;
      gap = 0;
      starts[count] = i;
      count += 1;
      for (let s = 0; s < matches.length; s += 1) this.#automata[s]!.step(matches[s]!, code);
    }
    let tail = 0;
    for (const match of matches) tail = Math.max(tail, match.length);
    if (tail === 0) return text.length;
    // What went before the held run goes; the white space between them is held with it.
    let end = starts[count - tail]!;
    while (end > 0 && isGap(text.charCodeAt(end - 1))) end -= 1;
    return end;
  }

  /** What is still held, scrubbed: the text ended. */
  flush(): string {
    if (this.#held === "") return "";
    const text = this.#held;
    const found = scan({ text, automata: this.#automata, carried: this.#carried, streaming: false });
    const out = this.#send({ text, found, end: text.length, sentCount: found.count });
    this.#held = "";
    this.#carried = undefined;
    return out;
  }

  #send(options: { text: string; found: Scan; end: number; sentCount: number }): string {
    const { found, end } = options;
    if (end === 0) return "";
    if (!found.found) {
      // Nothing covered: the text as it came (what render gives, without a piece per character).
      this.#afterCovered = false;
      return options.text.slice(0, end);
    }
    const out = render({ text: options.text, found, end, afterCovered: this.#afterCovered });
    const last = options.sentCount - 1;
    // White space sent after a covered character ends its run: a run going on gets a marker of its own.
    this.#afterCovered = last >= 0 && found.covered[last] === 1 && found.ends[last] === end;
    return out;
  }
}

/** A key's scrubbing for one attempt: whole texts, JSON documents, and streamed texts. */
export interface SecretScrubber {
  /** False when there is nothing to scrub (no key, or one shorter than 8 characters): every method returns its input. */
  readonly active: boolean;
  /** A whole text: a header value, a body that is not JSON, a streamed event as it goes out. */
  text(text: string): string;
  /**
   * A JSON document: each string in it (names included) scrubbed as its
   * decoded text, so JSON escapes hide nothing; a document that is not JSON
   * is scrubbed as text. Re-serialised only when a string was scrubbed;
   * otherwise read once more as raw text.
   */
  json(text: string): string;
  /** A scrubber for one streamed text, fed delta by delta. */
  held(): HeldTextScrubber;
  /** A scrubber for a stream's events that repeat what lies around one JSON string. */
  framed(): FramedTextScrubber;
}

/**
 * Scrubs the events of one stream as text, where each event carries one JSON
 * string (the next piece of a streamed text) after a part that repeats from
 * event to event: the answer's id, model and indexes. Nearly every event of a
 * stream is one, and reading that part again was most of what scrubbing an
 * event cost (issue 24). The part before the string of the last event found
 * clean is remembered; an event that begins with exactly that part has only
 * its string and what follows read. When no secret holds a quote, a quote is
 * a character of no secret and ends every run, escaped or not, and no escape
 * spans one (a quote is no hex digit); so every run in the event lies in the
 * part before its string or in the rest, and the first is known to hold none.
 *
 * A part may also hold a counter that changes with every event (Responses
 * numbers each event): given where it lies, an event whose part matches the
 * remembered one around the counter has read only the stretch between the
 * quotes that enclose the counter, and its string and what follows; by the
 * same reasoning, the rest of the part holds no run. (Finding where a part
 * differs, without being told, cost more in slices and comparisons than it
 * saved.) An event whose part differs otherwise, or whose rest holds a run,
 * or a secret that holds a quote, has the whole event read and scrubbed as
 * text.
 */
export class FramedTextScrubber {
  readonly #text: (value: string) => string;
  readonly #quotesEndRuns: boolean;
  /** The part before the string of the last event found clean, before its counter when it had one. */
  #head = "";
  /** When that event had a counter: the part between its counter and its string. */
  #afterCounter: string | undefined;

  constructor(options: { text: (value: string) => string; quotesEndRuns: boolean }) {
    this.#text = options.text;
    this.#quotesEndRuns = options.quotesEndRuns;
  }

  /**
   * `event` scrubbed as text; `textStart` is where its one JSON string begins
   * (its opening quote). `counter`, when given, is the span before it that
   * may differ from the last event's. `plainTextEnd`, when given, is where
   * that string ends (after its closing quote) when its text is one a
   * HeldTextScrubber sent as plain (`sentPlain`): then only what follows it
   * is read, the string being known to hold no run.
   */
  scrub(
    event: string,
    textStart: number,
    place: { counter?: TextSpan | undefined; plainTextEnd?: number | undefined } = {},
  ): string {
    const { counter } = place;
    if (!this.#quotesEndRuns || event.charCodeAt(textStart) !== QUOTE) return this.#text(event);
    if (!this.#repeatsHead(event, textStart, counter)) {
      const scrubbed = this.#text(event);
      if (scrubbed === event) {
        this.#head = event.slice(0, counter?.start ?? textStart);
        this.#afterCounter = counter && event.slice(counter.end, textStart);
      }
      return scrubbed;
    }
    const rest = event.slice(place.plainTextEnd ?? textStart);
    return this.#text(rest) === rest ? event : this.#text(event);
  }

  /** Whether the event's part before its string is the remembered clean one, but for a counter whose stretch holds no run. */
  #repeatsHead(event: string, textStart: number, counter: TextSpan | undefined): boolean {
    // Compared as slices: V8's startsWith reads a character at a time, several times slower.
    if (counter === undefined) return this.#afterCounter === undefined && event.slice(0, textStart) === this.#head;
    if (
      this.#afterCounter === undefined ||
      event.slice(0, counter.start) !== this.#head ||
      event.slice(counter.end, textStart) !== this.#afterCounter
    )
      return false;
    const from = event.lastIndexOf('"', counter.start - 1);
    const to = event.indexOf('"', counter.end);
    if (from < 0 || to < 0 || to > textStart) return false;
    const stretch = event.slice(from, to + 1);
    return this.#text(stretch) === stretch;
  }
}

/** Where a span of a text lies: from `start` up to `end`. */
export interface TextSpan {
  start: number;
  end: number;
}

/**
 * A scrubber for the given secrets, built per attempt (the key is decrypted
 * for one attempt only, and nothing derived from it outlives the attempt).
 * White space inside a secret is ignored, as it is in the text.
 */
export function createScrubber(secrets: string | undefined | readonly (string | undefined)[]): SecretScrubber {
  const list = Array.isArray(secrets) ? secrets : [secrets];
  const automata: KeyAutomaton[] = [];
  const visibleSecrets: string[] = [];
  for (const secret of list) {
    if (typeof secret !== "string") continue;
    let visible = "";
    for (let i = 0; i < secret.length; i += 1) if (!isGap(secret.charCodeAt(i))) visible += secret[i];
    if (visible.length < MIN_FRAGMENT) continue;
    automata.push(new KeyAutomaton(visible));
    visibleSecrets.push(visible);
  }
  // Without a secret nothing is scanned: no table (a scrubber of nothing is made per call).
  const pairs = visibleSecrets.length === 0 ? NO_PAIRS : neighbourPairs(visibleSecrets);
  const holdsAnyRun = (value: string): boolean => trailingPairRun(value, pairs) < 0 && holdsRun(value, automata);
  const text = (value: string): string => {
    if (automata.length === 0 || value.length < MIN_FRAGMENT || !holdsAnyRun(value)) return value;
    const found = scan({ text: value, automata, streaming: false });
    return found.found ? render({ text: value, found, end: value.length, afterCovered: false }) : value;
  };
  return {
    active: automata.length > 0,
    text,
    json(document) {
      if (automata.length === 0) return document;
      // Without an escaped backslash, each decoded string is its raw characters read through one
      // level of escapes, which is how the raw text is scanned: no run in the raw text means none
      // in any string, and the document goes out as it came without being parsed.
      if (scanReadsStrings(document) && !holdsAnyRun(document)) return document;
      let parsed: unknown;
      try {
        parsed = JSON.parse(document);
      } catch {
        return text(document);
      }
      const scrubbed = scrubValue(parsed, text);
      // Unchanged, the document goes out as it came (numbers, spacing), read once more as
      // text for what parsing hides (a property a later duplicate replaced).
      return scrubbed === parsed ? text(document) : JSON.stringify(scrubbed);
    },
    held: () => new HeldTextScrubber({ automata, pairs }),
    framed: () => new FramedTextScrubber({ text, quotesEndRuns: !visibleSecrets.some((s) => s.includes('"')) }),
  };
}

/** The value with each string (object keys included) passed through `scrub`; the same value when none changed. */
function scrubValue(value: unknown, scrub: (text: string) => string): unknown {
  if (typeof value === "string") return scrub(value);
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    for (let i = 0; i < value.length; i += 1) {
      const item = scrubValue(value[i], scrub);
      if (item !== value[i]) (out ??= value.slice())[i] = item;
    }
    return out ?? value;
  }
  if (value === null || typeof value !== "object") return value;
  let changed = false;
  // No prototype: a "__proto__" property stays a property.
  const out = Object.create(null) as Record<string, unknown>;
  for (const [key, item] of Object.entries(value)) {
    const name = scrub(key);
    const scrubbed = scrubValue(item, scrub);
    if (name !== key || scrubbed !== item) changed = true;
    out[name] = scrubbed;
  }
  return changed ? out : value;
}

/** `\\` or `\u005c`: a JSON escape that decodes to a backslash, so a decoded string may hold escapes of its own. */
const ESCAPED_BACKSLASH = /\\\\|\\u005[cC]/;

/**
 * True when scrubbing the JSON text as text reads each of its strings as
 * decoded: without an escaped backslash, a decoded string is its raw
 * characters read through one level of escapes, which is how the scan reads
 * them, so `text` finds every run `json` would (only the marker's place
 * differs: in the text as it came, not in the document written again).
 */
export function scanReadsStrings(document: string): boolean {
  return !ESCAPED_BACKSLASH.test(document);
}

/** Replace the key and every run of at least 8 of its characters found in `text`. */
export function scrubSecret(text: string, secret: string | undefined): string {
  return createScrubber(secret).text(text);
}
