// The scrubber's quick test of a text (does it hold a run of 8 key
// characters at all?) must never let a run through: thousands of texts with
// fragments of a key planted in them, spaced out, escaped, at every offset,
// come out with no 8 characters of the key left in them, and texts with no
// fragment come out unchanged. A stream's events, scrubbed without reading
// again the part before their text that the last clean event had
// (FramedTextScrubber), come out exactly as scrubbing each whole event makes
// them: thousands of random streams whose events repeat that part, change
// it, and plant key fragments in it and in the texts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createScrubber, REDACTED, type TextSpan } from "../src/secret-scrubber.js";

const KEY = "sk-ant-api03-Zq8fK2vLm9XwR4tYp7HsBn3Jc6DgUe1Ao5Vi0Nx-QrTy";

/** A seeded generator, so a failure is the same on every run. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

const WORDS = ["the", "answer", "is", "1733100000", "chatcmpl-9f", '{"delta":', "Zq", "api", "ok.", "\\n", "sk-"];

/** A fragment of the key written the ways a model might: plain, spaced out, with JSON escapes for space or letters. */
function disguise(fragment: string, random: () => number): string {
  let out = "";
  for (const char of fragment) {
    const roll = random();
    if (roll < 0.15) out += `\\u00${char.charCodeAt(0).toString(16).padStart(2, "0")}`;
    else out += char;
    const gap = random();
    if (gap < 0.1) out += " ";
    else if (gap < 0.15) out += "\\n";
    else if (gap < 0.2) out += "\\u0020";
    else if (gap < 0.22) out += "\u200b";
  }
  return out;
}

/** The text as the leak check reads it: JSON escapes decoded, white space and zero-width characters gone. */
function squeeze(text: string): string {
  return text
    .replace(/\\u([0-9a-fA-F]{4})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))
    .replace(/\\[nrt]/g, " ")
    .replace(/[\s\u200b]/g, "");
}

function leaks(text: string): string[] {
  const squeezed = squeeze(text);
  const found: string[] = [];
  for (let i = 0; i + 8 <= KEY.length; i += 1)
    if (squeezed.includes(KEY.slice(i, i + 8))) found.push(KEY.slice(i, i + 8));
  return found;
}

void test("no text with a planted fragment of 8 or more key characters keeps one, however it is spaced or escaped", () => {
  const scrubber = createScrubber(KEY);
  const random = seeded(24);
  for (let round = 0; round < 3_000; round += 1) {
    const parts: string[] = [];
    for (let i = 0; i < 1 + Math.floor(random() * 6); i += 1) parts.push(WORDS[Math.floor(random() * WORDS.length)]!);
    const length = 8 + Math.floor(random() * 12);
    const start = Math.floor(random() * (KEY.length - length + 1));
    const fragment = KEY.slice(start, start + length);
    parts.splice(Math.floor(random() * (parts.length + 1)), 0, disguise(fragment, random));
    const text = parts.join(random() < 0.5 ? " " : "");
    assert.ok(leaks(text).length > 0, `the planted text must leak before scrubbing: ${text}`);
    for (const scrubbed of [scrubber.text(text), scrubber.json(JSON.stringify({ content: text }))]) {
      assert.deepEqual(leaks(scrubbed), [], `round ${round}: ${JSON.stringify(text)} came out as ${scrubbed}`);
      assert.ok(scrubbed.includes(REDACTED), `round ${round}: nothing was marked in ${scrubbed}`);
    }
  }
});

void test("texts with 7 key characters in a row at most come out exactly as they went in", () => {
  const scrubber = createScrubber(KEY);
  const random = seeded(7);
  for (let round = 0; round < 2_000; round += 1) {
    const parts: string[] = [];
    for (let i = 0; i < 2 + Math.floor(random() * 8); i += 1) {
      if (random() < 0.3) {
        const start = Math.floor(random() * (KEY.length - 7));
        parts.push(KEY.slice(start, start + 1 + Math.floor(random() * 7)));
      } else {
        parts.push(WORDS[Math.floor(random() * WORDS.length)]!);
      }
    }
    // A space between the parts, so no two fragments join into a longer run.
    const text = parts.join(" ");
    if (leaks(text).length > 0) continue;
    assert.equal(scrubber.text(text), text);
  }
});

/** Pieces a string value of an event's frame is made of: words, escapes, and fragments of the key. */
function value(random: () => number): string {
  const pieces = ["msg_", "01", "gpt-4o", '\\"', "\\\\", "\\u0041", " ", "api", "Zq8f"];
  let out = "";
  for (let i = 0; i < Math.floor(random() * 4); i += 1) {
    if (random() < 0.3) {
      const start = Math.floor(random() * (KEY.length - 12));
      out += KEY.slice(start, start + 3 + Math.floor(random() * 10));
    } else {
      out += pieces[Math.floor(random() * pieces.length)];
    }
  }
  return out;
}

/**
 * An event's frame before its text: a counter, then members whose values
 * `values` gives, ending where the text's string begins; and where its
 * counter lies.
 */
function head(values: readonly string[], counter: string): { before: string; counter: TextSpan } {
  const members = values.map((text, i) => `"m${i}":"${text}"`);
  const start = 'data: {"type":"delta","sequence_number":'.length;
  const before = `data: {"type":"delta","sequence_number":${counter},${members.join(",")},"delta":`;
  return { before, counter: { start, end: start + counter.length } };
}

/**
 * Random streams through the framed scrubber, each event compared with
 * scrubbing it whole; `throughHeld`: each event's text is what a held
 * scrubber of the stream's text sends, and its end is told when sent plain.
 */
function framedAgainstWhole(options: { seed: number; throughHeld: boolean }): {
  redacted: number;
  counted: number;
  plain: number;
} {
  const scrubber = createScrubber(KEY);
  const random = seeded(options.seed);
  let redacted = 0;
  let counted = 0;
  let plain = 0;
  for (let stream = 0; stream < 600; stream += 1) {
    const framed = scrubber.framed();
    const held = scrubber.held();
    const values = Array.from({ length: 1 + Math.floor(random() * 4) }, () => value(random));
    // Most streams say where their counter lies (the reader of Responses events does); some do not.
    const tellsCounter = random() < 0.7;
    for (let sequence = 0; sequence < 30; sequence += 1) {
      // Most events repeat the frame but for their counter; some change one member.
      if (random() < 0.25) values[Math.floor(random() * values.length)] = value(random);
      // The counter is a number, or now and then a piece of the key long enough to be a run with its neighbours.
      const counterText =
        random() < 0.15 ? KEY.slice(3, 3 + Math.floor(random() * 12)).replaceAll("-", "") : String(sequence);
      const { before, counter } = head(values, counterText);
      const came = random() < 0.2 ? KEY.slice(0, Math.floor(random() * 14)) : value(random);
      const text = options.throughHeld ? held.push(came) : came;
      if (options.throughHeld && text === "") continue;
      const string = JSON.stringify(text);
      const tail = random() < 0.5 ? "}\n\n" : `,"obfuscation":"${value(random)}"}\n\n`;
      const event = before + string + tail;
      const expected = scrubber.text(event);
      if (expected !== event) redacted += 1;
      if (tellsCounter) counted += 1;
      const plainTextEnd = options.throughHeld && held.sentPlain ? before.length + string.length : undefined;
      if (plainTextEnd !== undefined) plain += 1;
      const out = framed.scrub(event, before.length, { counter: tellsCounter ? counter : undefined, plainTextEnd });
      assert.equal(out, expected, `stream ${stream}, event ${sequence}: ${event}`);
    }
  }
  return { redacted, counted, plain };
}

void test("a stream's events come out of the framed scrubber exactly as scrubbing each whole event makes them", () => {
  const { redacted, counted } = framedAgainstWhole({ seed: 42, throughHeld: false });
  // The streams did plant whole runs, in frames, counters and texts, so the comparison covers scrubbing too.
  assert.ok(redacted > 150, `only ${redacted} events held a run`);
  assert.ok(counted > 10_000, `only ${counted} events told their counter`);
});

void test("events whose text a held scrubber sent plain, read only after their text, come out as scrubbed whole", () => {
  const { redacted, plain } = framedAgainstWhole({ seed: 43, throughHeld: true });
  // Runs still arrive in frames, counters and what follows the texts; most texts go plain.
  assert.ok(redacted > 100, `only ${redacted} events held a run`);
  assert.ok(plain > 2_500, `only ${plain} texts were sent plain`);
});

void test("a text with a backslash is never sent plain: its event reads its escapes one level less", () => {
  // A key with what a JSON escape's letters look like: read through the escape, the text holds 4 of
  // its characters; read as its event carries it (the backslash escaped), 12 in a row.
  const key = "Qxu0041bcdefghPz";
  const scrubber = createScrubber(key);
  const held = scrubber.held();
  const sent = held.push("\\u0041bcdefgh.") + held.flush();
  assert.equal(sent, "\\u0041bcdefgh.");
  assert.equal(held.sentPlain, false);
  const before = 'data: {"delta":';
  const framed = scrubber.framed();
  assert.equal(framed.scrub(`${before}"clean"}\n\n`, before.length), `${before}"clean"}\n\n`);
  const event = `${before}${JSON.stringify(sent)}}\n\n`;
  const out = framed.scrub(event, before.length, { plainTextEnd: held.sentPlain ? event.length - 3 : undefined });
  assert.equal(out, scrubber.text(event));
  assert.ok(out.includes(REDACTED), out);
});

/** The white space the held-text tests below write: spaces, a newline, a tab and a zero-width space. */
const isTestGap = (char: string): boolean => /^[ \n\t\u200b]$/.test(char);

/**
 * What a held scrubber sends of `text` (what it held, then the delta: no
 * backslash, no run of 8), by brute force: all of it but the longest run of
 * key characters it ends with (read through white space, a gap of more than
 * 32 ending a run), and the white space before that run.
 */
function sentOf(text: string, key: string): string {
  const at: number[] = [];
  for (let i = 0; i < text.length; i += 1) if (!isTestGap(text[i]!)) at.push(i);
  if (at.length === 0 || text.length - 1 - at.at(-1)! > 32) return text;
  let tail = 0;
  for (let length = 1; length <= Math.min(at.length, 7); length += 1) {
    const chars = at.slice(-length);
    if (length > 1 && chars[1]! - chars[0]! - 1 > 32) break;
    if (!key.includes(chars.map((i) => text[i]).join(""))) break;
    tail = length;
  }
  if (tail === 0) return text;
  let end = at[at.length - tail]!;
  while (end > 0 && isTestGap(text[end - 1]!)) end -= 1;
  return text.slice(0, end);
}

void test("a held text sends all but the run of key characters it ends with, delta by delta", () => {
  const scrubber = createScrubber(KEY);
  const random = seeded(11);
  const gaps = [" ", "\n", "\t", "\u200b", " ".repeat(33), " ".repeat(32)];
  let held = 0;
  let plain = 0;
  let pushes = 0;
  for (let round = 0; round < 2_000; round += 1) {
    let text = "";
    for (let i = 0; i < 2 + Math.floor(random() * 8); i += 1) {
      const roll = random();
      if (roll < 0.4) {
        const start = Math.floor(random() * (KEY.length - 7));
        text += KEY.slice(start, start + 1 + Math.floor(random() * 7));
      } else if (roll < 0.7) text += gaps[Math.floor(random() * gaps.length)]!;
      else text += ["the", "answer", "is", "ok.", "Zq", "api", "\u{1F600}", "é"][Math.floor(random() * 8)]!;
    }
    if (leaks(text).length > 0) continue;
    const scrubbing = scrubber.held();
    let sent = "";
    let waiting = "";
    for (let at = 0; at < text.length;) {
      const delta = text.slice(at, at + 1 + Math.floor(random() * 6));
      at += delta.length;
      const expected = sentOf(waiting + delta, KEY);
      assert.equal(scrubbing.push(delta), expected, `round ${round}, after ${at} of ${JSON.stringify(text)}`);
      // The quick reading decides most pushes; a text it cannot clear is scanned whole, to the same end.
      if (scrubbing.sentPlain) plain += 1;
      pushes += 1;
      sent += expected;
      waiting = (waiting + delta).slice(expected.length);
      if (waiting !== "") held += 1;
    }
    assert.equal(sent + scrubbing.flush(), text);
  }
  // Most deltas end in characters of the key: the comparison covers holding back, not only sending.
  assert.ok(held > 2_000, `only ${held} pushes held text back`);
  assert.ok(plain > pushes * 0.8, `only ${plain} of ${pushes} pushes were sent plain`);
});

void test("a key that arrives in a counter's stretch is scrubbed, though the events around it were clean", () => {
  const scrubber = createScrubber(KEY);
  const framed = scrubber.framed();
  const event = (counter: string, text: string): { event: string; before: string; counter: TextSpan } => {
    const start = 'data: {"id":"msg_01","n":'.length;
    const before = `data: {"id":"msg_01","n":${counter},"delta":`;
    return { event: `${before}${JSON.stringify(text)}}\n\n`, before, counter: { start, end: start + counter.length } };
  };
  for (const [counter, text] of [
    ["1", "Hello"],
    ["2", " there"],
  ] as const) {
    const e = event(counter, text);
    assert.equal(framed.scrub(e.event, e.before.length, { counter: e.counter }), e.event);
  }
  const leaking = event(KEY.slice(3, 20), "!");
  const out = framed.scrub(leaking.event, leaking.before.length, { counter: leaking.counter });
  assert.ok(!out.includes(KEY.slice(3, 11)), out);
  assert.ok(out.includes(REDACTED), out);
  // The next event's counter is a number again: its frame is read again, and it goes out whole.
  const after = event("4", "!");
  assert.equal(framed.scrub(after.event, after.before.length, { counter: after.counter }), after.event);
});

void test("a key that arrives in the frame of a later event is scrubbed, though the events before it were clean", () => {
  const scrubber = createScrubber(KEY);
  const framed = scrubber.framed();
  const clean = 'data: {"id":"msg_01","model":"claude","delta":';
  assert.equal(framed.scrub(`${clean}"Hello"}\n\n`, clean.length), `${clean}"Hello"}\n\n`);
  assert.equal(framed.scrub(`${clean}" there"}\n\n`, clean.length), `${clean}" there"}\n\n`);
  // Only the id differs from the clean frame, and the key runs on into what the frames share.
  const leaking = `data: {"id":"${KEY.slice(0, 20)}","model":"claude","delta":`;
  const out = framed.scrub(`${leaking}"!"}\n\n`, leaking.length);
  assert.ok(!out.includes(KEY.slice(0, 8)), out);
  assert.ok(out.includes(REDACTED), out);
});

void test("with a secret that holds a quote, every event is read whole", () => {
  const secret = 'abcde"fghij';
  const scrubber = createScrubber(secret);
  const framed = scrubber.framed();
  const before = 'data: {"id":"abcde';
  // A clean event first, so the next one repeats a part known clean.
  assert.equal(framed.scrub(`${before}"xyz"}\n\n`, before.length), `${before}"xyz"}\n\n`);
  // The run crosses the string's opening quote: read apart, neither side holds 8 characters of it.
  const event = `${before}"fghij"}\n\n`;
  const out = framed.scrub(event, before.length);
  assert.equal(out, scrubber.text(event));
  assert.ok(out.includes(REDACTED), out);
});
