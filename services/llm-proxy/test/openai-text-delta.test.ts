// The OpenAI text chunk read without a parse (openai-text-delta.ts): whatever
// it accepts must parse to exactly what it says (one choice, one text field,
// that text, no finish_reason, no usage but a null one, no error), and the
// places it gives must be the text's string and the usage member. Chunks
// that differ from OpenAI's in any way the meter or scrubber would read
// differently are declined, so they take the parse.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createScrubber } from "@oz0/serving";
import { openAiChatCompletions, OpenAiStreamMeter } from "../src/wire-formats/openai-chat-completions.js";
import { readTextDelta } from "../src/wire-formats/openai-text-delta.js";

const KEY = "sk-proj-Zq8VtR3mW1xNcB7yLp5aK2dHs9uGfJ4e";

/** A chunk as OpenAI writes it, with `text` in `field` of choice `index`. */
function openAiChunk(text: string, options: { field?: string; index?: number; padding?: string } = {}): string {
  const chunk = {
    id: "chatcmpl-Bx9",
    object: "chat.completion.chunk",
    created: 1_741_000_000,
    model: "gpt-4.1-mini-2025-04-14",
    service_tier: "default",
    system_fingerprint: "fp_6f2eabb9a5",
    choices: [
      { index: options.index ?? 0, delta: { [options.field ?? "content"]: text }, logprobs: null, finish_reason: null },
    ],
    usage: null,
    obfuscation: options.padding ?? "nX3k",
  };
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

/** Holds a reading to what JSON.parse makes of the same chunk. */
function assertReadsAsParsed(event: string): void {
  const delta = readTextDelta(event);
  if (!delta) return;
  const data = event.slice("data: ".length, -2);
  const chunk = JSON.parse(data) as Record<string, unknown>;
  assert.equal("error" in chunk, false, event);
  assert.equal(chunk.usage === null, delta.nullUsageAt >= 0, event);
  if (delta.nullUsageAt < 0) assert.equal("usage" in chunk, false, event);
  const choices = chunk.choices as Record<string, unknown>[];
  assert.equal(choices.length, 1, event);
  const choice = choices[0]!;
  assert.equal(choice.index, delta.index, event);
  assert.equal(choice.finish_reason ?? null, null, event);
  assert.deepEqual(Object.keys(choice.delta as object), [delta.field], event);
  assert.equal((choice.delta as Record<string, unknown>)[delta.field], delta.text, event);
  assert.equal(JSON.parse(event.slice(delta.textStart, delta.textEnd)), delta.text, event);
  if (delta.nullUsageAt >= 0) {
    assert.equal(event.slice(delta.nullUsageAt, delta.nullUsageAt + 13), ',"usage":null', event);
    const cut = event.slice(0, delta.nullUsageAt) + event.slice(delta.nullUsageAt + 13);
    const { usage: _usage, ...rest } = chunk;
    assert.deepEqual(JSON.parse(cut.slice("data: ".length, -2)), rest, event);
  }
}

/** A small deterministic generator, so a failure names a case that comes back. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648;
    return state / 2_147_483_648;
  };
}

const PIECES = [
  '"',
  "\\",
  "\\u0041",
  "\\n",
  "\n",
  "\u0001",
  "é",
  "😀",
  "\ud800",
  "}",
  "]",
  ",",
  ":",
  '"usage":null',
  "a",
  " ",
];

void describe("readTextDelta", () => {
  void it("reads OpenAI's text chunks, and the text, its place and the usage's place agree with JSON.parse", () => {
    for (const text of ["Hello", "", 'say "hi"\n', "tab\there \\ back", "\u2028é😀", KEY.slice(0, 9)]) {
      for (const field of ["content", "reasoning_content", "reasoning", "refusal"]) {
        const event = openAiChunk(text, { field, index: 2 });
        const delta = readTextDelta(event);
        assert.ok(delta, `read: ${event}`);
        assert.equal(delta.text, text);
        assert.equal(delta.field, field);
        assert.equal(delta.index, 2);
        assertReadsAsParsed(event);
      }
    }
  });

  void it("declines every chunk the meter or scrubber would read as more than one text", () => {
    const base = JSON.parse(openAiChunk("hi").slice(6, -2)) as Record<string, unknown>;
    const choice = (base.choices as Record<string, unknown>[])[0]!;
    const variants: unknown[] = [
      { ...base, choices: [{ ...choice, finish_reason: "stop" }] },
      { ...base, choices: [choice, { ...choice, index: 1 }] },
      { ...base, choices: [{ ...choice, delta: { content: "hi", refusal: null } }] },
      { ...base, choices: [{ ...choice, delta: { role: "assistant", content: "" } }] },
      { ...base, choices: [{ ...choice, delta: { content: "a", tool_calls: [] } }] },
      { ...base, choices: [{ ...choice, delta: { content: null } }] },
      { ...base, choices: [{ ...choice, index: "0" }] },
      { ...base, usage: { prompt_tokens: 1 } },
      { ...base, error: { message: "x" } },
      { ...base, extra: { nested: 1 } },
      { ...base, created: 1.5 },
      { ...base, choices: [] },
    ];
    for (const variant of variants) {
      const event = `data: ${JSON.stringify(variant)}\n\n`;
      assert.equal(readTextDelta(event), undefined, event);
    }
    const text = openAiChunk("hi");
    const declined = [
      text.replace('"choices"', ' "choices"'),
      text.replace("data: ", "data:"),
      text.replace("\n\n", "\r\n\r\n"),
      `event: x\n${text}`,
      text.replace('"id"', '"usage":null,"id"'),
      text.replace('"id":"chatcmpl-Bx9"', '"choices":[],"id":"chatcmpl-Bx9"'),
      text.replace('"obfuscation":"nX3k"', '"obfuscation":"nX3k","choices":[]'),
      text.replace('"obfuscation":"nX3k"', '"obfuscation":"nX3k","usage":{"prompt_tokens":9}'),
      text.replace('"content":"hi"', '"content":"h\\x"'),
      text.replace('"content":"hi"', '"content":"h\u0001"'),
      text.replace('"content":"hi"', '"content":"h","content":"i"'),
    ];
    for (const event of declined) assert.equal(readTextDelta(event), undefined, event);
  });

  void it("agrees with JSON.parse on chunks cut and spliced at random", () => {
    const next = random(24);
    const seeds = [openAiChunk("Hello there"), openAiChunk('a "quoted" \\ text', { field: "refusal", index: 7 })];
    let read = 0;
    for (let round = 0; round < 20_000; round += 1) {
      let event = seeds[round % seeds.length]!;
      const edits = 1 + Math.floor(next() * 3);
      for (let e = 0; e < edits; e += 1) {
        const at = 6 + Math.floor(next() * (event.length - 8));
        const piece = PIECES[Math.floor(next() * PIECES.length)]!;
        const cut = Math.floor(next() * 3);
        event = event.slice(0, at) + piece + event.slice(at + cut);
      }
      let parses = true;
      try {
        JSON.parse(event.slice("data: ".length, -2));
      } catch {
        parses = false;
      }
      if (!parses || !event.startsWith("data: ") || !event.endsWith("\n\n")) {
        assert.equal(readTextDelta(event), undefined, event);
        continue;
      }
      if (readTextDelta(event)) read += 1;
      assertReadsAsParsed(event);
    }
    assert.ok(read > 100, `only ${read} edited chunks were read without a parse: the cases test too little`);
  });
});

void describe("OpenAI chat streams read without a parse", () => {
  const meterAndScrubber = (clientWantsUsage: boolean) => {
    const meter = new OpenAiStreamMeter({ clientWantsUsage });
    const scrubber = openAiChatCompletions.calls!.streamScrubber(createScrubber(KEY));
    return (event: string): string => {
      const forwarded = meter.onEvent(event);
      return forwarded === undefined ? "" : scrubber.push(forwarded);
    };
  };
  const first = `data: ${JSON.stringify({
    id: "chatcmpl-Bx9",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-4.1-mini",
    choices: [{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }],
    usage: null,
  })}\n\n`;
  const last = `data: ${JSON.stringify({
    id: "chatcmpl-Bx9",
    object: "chat.completion.chunk",
    created: 1,
    model: "gpt-4.1-mini",
    choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }],
    usage: null,
  })}\n\ndata: [DONE]\n\n`;

  /** The text a client reads from the events forwarded. */
  const received = (out: string): string => {
    let text = "";
    for (const event of out.split("\n\n")) {
      if (!event.startsWith("data: {")) continue;
      const chunk = JSON.parse(event.slice(6)) as { choices: { delta: { content?: string } }[]; usage?: unknown };
      assert.equal("usage" in chunk, false, "the usage: null the proxy asked for is cut");
      for (const choice of chunk.choices) text += choice.delta.content ?? "";
    }
    return text;
  };

  void it("scrubs a key sent a few characters a chunk, and cuts each chunk's usage: null", () => {
    const answer = `Your key is ${KEY}, keep it safe.`;
    const push = meterAndScrubber(false);
    let out = push(first);
    for (let i = 0; i < answer.length; i += 3) {
      const event = openAiChunk(answer.slice(i, i + 3));
      assert.ok(readTextDelta(event), "the chunk takes the path without a parse");
      out += push(event);
    }
    out += push(last.split("\n\n")[0] + "\n\n") + push("data: [DONE]\n\n");
    assert.equal(received(out), "Your key is [redacted], keep it safe.");
    assert.equal(out.includes(KEY.slice(0, 8)), false);
  });

  void it("counts the characters a whole parse counts", () => {
    const texts = ["abc", "d\\e", "😀"];
    const fields = ["content", "reasoning_content", "refusal"];
    const fast = new OpenAiStreamMeter({ clientWantsUsage: true });
    const parsed = new OpenAiStreamMeter({ clientWantsUsage: true });
    fast.onEvent(first);
    for (let i = 0; i < texts.length; i += 1) {
      const event = openAiChunk(texts[i]!, { field: fields[i] });
      fast.onEvent(event);
      // The same chunk with a space the reader declines: parsed.
      parsed.onEvent(event.replace('"choices"', ' "choices"'));
    }
    assert.deepEqual(fast.reading(0), parsed.reading(0));
    assert.equal(fast.reading(0).usage.output, 2);
  });
});
