// Stream events read without a parse (text-delta-events.ts). Whatever a
// reader accepts must parse to exactly what it says (one text, that text, at
// that place; for OpenAI chat no finish_reason and no usage but a null one),
// held to parseEvent, which the meters and scrubbers read every other event
// with: on each provider's own events, on variants the meter or scrubber
// would read differently (declined, so they are parsed), and on events cut
// and spliced at random. Then whole streams: a key sent a few characters an
// event is scrubbed, held text still goes out when its text ends, and the
// meters count what a parse counts.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { createScrubber } from "@oz0/serving";
import { AnthropicStreamMeter, anthropicMessages } from "../src/wire-formats/anthropic-messages.js";
import { openAiChatCompletions, OpenAiStreamMeter } from "../src/wire-formats/openai-chat-completions.js";
import { openAiResponses, ResponsesStreamMeter } from "../src/wire-formats/openai-responses.js";
import { parseEvent, type Json } from "../src/wire-formats/sse-json.js";
import {
  readAnthropicTextDelta,
  readChatTextDelta,
  readResponsesTextDelta,
} from "../src/wire-formats/text-delta-events.js";
import type { StreamMeter, WireFormat } from "../src/wire-formats/wire-format.js";

const KEY = "sk-proj-Zq8VtR3mW1xNcB7yLp5aK2dHs9uGfJ4e";

const sse = (data: unknown, name?: string): string =>
  `${name ? `event: ${name}\n` : ""}data: ${JSON.stringify(data)}\n\n`;

/** A chunk as OpenAI writes it, with `text` in `field` of choice `index`. */
function chatChunk(text: string, options: { field?: string; index?: number } = {}): string {
  return sse({
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
    obfuscation: "nX3k",
  });
}

const ANTHROPIC_TYPES: Record<string, string> = {
  text: "text_delta",
  partial_json: "input_json_delta",
  thinking: "thinking_delta",
};

/** A content_block_delta as Anthropic writes it. */
function anthropicDelta(text: string, options: { field?: string; index?: number } = {}): string {
  const field = options.field ?? "text";
  return sse(
    { type: "content_block_delta", index: options.index ?? 0, delta: { type: ANTHROPIC_TYPES[field], [field]: text } },
    "content_block_delta",
  );
}

/** A Responses text delta as OpenAI writes it. */
function responsesDelta(text: string, options: { type?: string; part?: string; sequence?: number } = {}): string {
  const type = options.type ?? "response.output_text.delta";
  return sse(
    {
      type,
      sequence_number: options.sequence ?? 4,
      item_id: "msg_67c9fdcecf488190bdd9a0409de3a1ec07b8b0ad4e5eb654",
      output_index: 1,
      ...(options.part === undefined ? {} : { [options.part]: 0 }),
      delta: text,
      logprobs: [],
      obfuscation: "u8Yh1cX",
    },
    type,
  );
}

/** A place's string is the text, and the event parses. */
function assertPlace(event: string, reading: { textStart: number; textEnd: number; text: string }): Json {
  assert.equal(JSON.parse(event.slice(reading.textStart, reading.textEnd)), reading.text, event);
  const parsed = parseEvent(event);
  assert.ok(parsed, `a reading of an event that does not parse: ${event}`);
  return parsed;
}

interface Format {
  name: string;
  /** Events the provider writes, each read without a parse. */
  own: string[];
  /** Variants the meter or scrubber would read differently: each declined. */
  declined: string[];
  /** Reads the event; when it reads, holds the reading to the parse (assert), and says so. */
  check(event: string): boolean;
}

const FORMATS: Format[] = [
  {
    name: "OpenAI chat",
    own: ["content", "reasoning_content", "reasoning", "refusal"].map((field) => chatChunk("Hello", { field })),
    declined: [
      sse({ choices: [{ index: 0, delta: { content: "hi" }, finish_reason: "stop" }] }),
      sse({
        choices: [
          { index: 0, delta: { content: "hi" } },
          { index: 1, delta: { content: "hi" } },
        ],
      }),
      sse({ choices: [{ index: 0, delta: { content: "hi", refusal: null } }] }),
      sse({ choices: [{ index: 0, delta: { role: "assistant", content: "" } }] }),
      sse({ choices: [{ index: 0, delta: { content: "a", tool_calls: [] } }] }),
      sse({ choices: [{ index: 0, delta: { content: null } }] }),
      sse({ choices: [{ index: "0", delta: { content: "hi" } }] }),
      sse({ choices: [{ index: 0, delta: { content: "hi" } }], usage: { prompt_tokens: 1 } }),
      sse({ choices: [{ index: 0, delta: { content: "hi" } }], error: { message: "x" } }),
      sse({ extra: { nested: 1 }, choices: [{ index: 0, delta: { content: "hi" } }] }),
      sse({ created: 1.5, choices: [{ index: 0, delta: { content: "hi" } }] }),
      sse({ choices: [] }),
      chatChunk("hi").replace('"choices"', ' "choices"'),
      chatChunk("hi").replace("data: ", "data:"),
      chatChunk("hi").replace("\n\n", "\r\n\r\n"),
      `event: x\n${chatChunk("hi")}`,
      chatChunk("hi").replace('"id"', '"usage":null,"id"'),
      chatChunk("hi").replace('"id":', '"choices":[],"id":'),
      chatChunk("hi").replace('"obfuscation":"nX3k"', '"obfuscation":"nX3k","choices":[]'),
      chatChunk("hi").replace('"content":"hi"', '"content":"h\\x"'),
      chatChunk("hi").replace('"content":"hi"', '"content":"h\u0001"'),
      chatChunk("hi").replace('"content":"hi"', '"content":"h","content":"i"'),
    ],
    check(event) {
      const delta = readChatTextDelta(event);
      if (!delta) return false;
      const chunk = assertPlace(event, delta);
      assert.equal("error" in chunk, false, event);
      assert.equal(chunk.usage === null, delta.nullUsageAt >= 0, event);
      if (delta.nullUsageAt < 0) assert.equal("usage" in chunk, false, event);
      const choices = chunk.choices as Json[];
      assert.equal(choices.length, 1, event);
      assert.equal(choices[0]!.index, delta.index, event);
      assert.equal(choices[0]!.finish_reason ?? null, null, event);
      assert.deepEqual(choices[0]!.delta, { [delta.field]: delta.text }, event);
      if (delta.nullUsageAt >= 0) {
        assert.equal(event.slice(delta.nullUsageAt, delta.nullUsageAt + 13), ',"usage":null', event);
        const cut = event.slice(0, delta.nullUsageAt) + event.slice(delta.nullUsageAt + 13);
        const { usage: _usage, ...rest } = chunk;
        assert.deepEqual(parseEvent(cut), rest, event);
      }
      return true;
    },
  },
  {
    name: "Anthropic Messages",
    own: [
      ...Object.keys(ANTHROPIC_TYPES).map((field) => anthropicDelta("Hello", { field, index: 3 })),
      anthropicDelta("Hello").replace("event: content_block_delta\n", ""),
    ],
    declined: [
      anthropicDelta("hi").replace('"type":"text_delta"', '"type":"thinking_delta"'),
      anthropicDelta("hi").replace('"text":"hi"', '"text":"hi","text":"ho"'),
      anthropicDelta("hi").replace('"index":0', '"index":0,"index":1'),
      anthropicDelta("hi").replace('"index":0', '"index":"0"'),
      anthropicDelta("hi").replace("event: content_block_delta", "event: ping"),
      anthropicDelta("hi").replace("}}", '},"usage":{"output_tokens":9}}'),
      sse({ type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "abc" } }),
      sse({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 5 } }),
    ],
    check(event) {
      const delta = readAnthropicTextDelta(event);
      if (!delta) return false;
      const parsed = assertPlace(event, delta);
      assert.deepEqual(
        parsed,
        { type: "content_block_delta", index: delta.index, delta: { type: delta.type, [delta.field]: delta.text } },
        event,
      );
      assert.equal(ANTHROPIC_TYPES[delta.field], delta.type, event);
      return true;
    },
  },
  {
    name: "OpenAI Responses",
    // Each with another sequence number, so the events spliced in turn differ in it too.
    own: [
      responsesDelta("Hello", { part: "content_index" }),
      responsesDelta("Hello", { type: "response.reasoning_summary_text.delta", part: "summary_index", sequence: 17 }),
      responsesDelta('{"city":', { type: "response.function_call_arguments.delta", sequence: 0 }),
      responsesDelta("Hello", { part: "content_index", sequence: 1234 }),
      responsesDelta("Hello", { part: "content_index", sequence: 1235 }),
    ],
    declined: [
      responsesDelta("hi", { part: "content_index" }).replace(
        '"content_index":0',
        '"content_index":0,"summary_index":1',
      ),
      responsesDelta("hi").replace('"output_index":1', '"output_index":1,"output_index":2'),
      responsesDelta("hi").replace('"delta":"hi"', '"delta":"hi","delta":"ho"'),
      responsesDelta("hi").replace(
        '"type":"response.output_text.delta"',
        '"type":"x","type":"response.output_text.delta"',
      ),
      responsesDelta("hi").replace('"logprobs":[]', '"logprobs":[{"token":"hi"}]'),
      responsesDelta("hi").replace('"logprobs":[]', '"response":{"id":"r"}'),
      responsesDelta("hi").replace('"output_index":1', '"output_index":"1"'),
      sse({ type: "response.output_text.done", output_index: 0, content_index: 0, text: "hi" }),
    ],
    check(event) {
      const delta = readResponsesTextDelta(event);
      if (!delta) return false;
      const parsed = assertPlace(event, delta);
      assert.equal(parsed.type, delta.type, event);
      assert.equal(parsed.delta, delta.text, event);
      assert.equal(parsed.output_index, delta.outputIndex, event);
      assert.equal(parsed.content_index ?? parsed.summary_index, delta.partIndex, event);
      // Its counter, when it says where one lies, is the text of the sequence number right after the type.
      if (delta.counter) {
        const member = '"sequence_number":';
        assert.equal(event.slice(delta.counter.start - member.length, delta.counter.start), member, event);
        assert.match(event.slice(delta.counter.start, delta.counter.end), /^(?:0|[1-9]\d{0,15})$/, event);
        assert.match(event.charAt(delta.counter.end), /[,}]/, event);
      } else
        assert.doesNotMatch(
          event,
          /^(?:event: [a-z_.]+\n)?data: \{"type":"[a-z_.]+","sequence_number":(?:0|[1-9]\d{0,15}),/,
          event,
        );
      if ("content_index" in parsed || "summary_index" in parsed) assert.notEqual(delta.partIndex, undefined, event);
      for (const [name, value] of Object.entries(parsed))
        assert.ok(value === null || typeof value !== "object" || (Array.isArray(value) && value.length === 0), name);
      return true;
    },
  },
];

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
  "null",
  "a",
  " ",
  "[]",
  "0",
  "7",
];

for (const format of FORMATS) {
  void describe(`${format.name}: text deltas read without a parse`, () => {
    void it("reads the provider's own delta events, and what it reads is what they parse to", () => {
      for (const event of format.own) {
        for (const text of ["Hello", "", 'say "hi"\n', "tab\there \\ back", "\u2028é😀", KEY.slice(0, 9)]) {
          const withText = event
            .replace('"Hello"', JSON.stringify(text))
            .replace('"{\\"city\\":"', JSON.stringify(text));
          assert.ok(format.check(withText), `read: ${withText}`);
        }
      }
    });

    void it("declines every variant its meter or scrubber would read as more than one text", () => {
      for (const event of format.declined) assert.equal(format.check(event), false, event);
    });

    void it("agrees with the parse on events cut and spliced at random", () => {
      const next = random(24);
      let read = 0;
      for (let round = 0; round < 10_000; round += 1) {
        let event = format.own[round % format.own.length]!;
        const edits = 1 + Math.floor(next() * 3);
        for (let e = 0; e < edits; e += 1) {
          const at = Math.floor(next() * (event.length - 2));
          const piece = PIECES[Math.floor(next() * PIECES.length)]!;
          event = event.slice(0, at) + piece + event.slice(at + Math.floor(next() * 3));
        }
        if (format.check(event)) read += 1;
      }
      assert.ok(read > 100, `only ${read} edited events were read without a parse: the cases test too little`);
    });
  });
}

void describe("OpenAI Responses: sequence numbers", () => {
  void it("reads an event that repeats the last head but for its sequence number, and none whose number is no JSON integer", () => {
    const responses = FORMATS.find((format) => format.name === "OpenAI Responses")!;
    const withNumber = (number: string): string =>
      responsesDelta("Hello", { part: "content_index" }).replace('"sequence_number":4', `"sequence_number":${number}`);
    for (const [number, read] of [
      ["4", true],
      ["5", true],
      ["0", true],
      ["10", true],
      ["9007199254740991", true],
      ["05", false],
      ["00", false],
      ["", false],
      ["-", false],
      ["1a", false],
      ["1 ", false],
    ] as const) {
      // Each right after a read event with another number, so it is read against that event's head.
      assert.equal(responses.check(withNumber("3")), true);
      assert.equal(responses.check(withNumber(number)), read, withNumber(number));
    }
    // A second sequence number is the one a parse keeps; the counter is the first, where the head repeats.
    const twice = withNumber("7").replace('"logprobs":[]', '"logprobs":[],"sequence_number":8');
    assert.equal(responses.check(twice), true);
    assert.equal(parseEvent(twice)?.sequence_number, 8);
    // A number longer than the reader counts is parsed, but the event is still read, by the whole expression.
    const long = withNumber("12345678901234567");
    assert.equal(readResponsesTextDelta(long)?.counter, undefined);
    assert.equal(responses.check(long), true);
  });
});

/** A stream's events through a meter, then a scrubber of KEY, as the proxy runs them. */
function throughProxy(format: WireFormat, meter: StreamMeter, events: string[]): string {
  const scrubber = format.calls!.streamScrubber(createScrubber(KEY));
  let out = "";
  for (const event of events) {
    const forwarded = meter.onEvent(event);
    if (forwarded !== undefined) out += scrubber.push(forwarded);
  }
  return out;
}

/** The pieces of an answer: three characters each. */
const pieces = (answer: string): string[] => answer.match(/[^]{1,3}/gu) ?? [];

const ANSWER = `Your key is ${KEY}, keep it safe. Bye sk-`;
const SCRUBBED = "Your key is [redacted], keep it safe. Bye sk-";

/** Each event's data, parsed (the client's reading). */
const dataOf = (out: string): Json[] =>
  out
    .split("\n\n")
    .map((event) => /^data: (\{.*)$/m.exec(event)?.[1])
    .filter((data): data is string => data !== undefined)
    .map((data) => JSON.parse(data) as Json);

void describe("streams read without a parse", () => {
  void it("OpenAI chat: a key sent three characters a chunk is scrubbed, held text goes out, usage: null is cut", () => {
    const head = { id: "chatcmpl-Bx9", object: "chat.completion.chunk", created: 1, model: "gpt-4.1-mini" };
    const events = [
      sse({
        ...head,
        choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }],
        usage: null,
      }),
      ...pieces(ANSWER).map((piece) => chatChunk(piece)),
      sse({ ...head, choices: [{ index: 0, delta: {}, finish_reason: "stop" }], usage: null }),
      "data: [DONE]\n\n",
    ];
    assert.ok(events.slice(1, -2).every((event) => readChatTextDelta(event)));
    const out = throughProxy(openAiChatCompletions, new OpenAiStreamMeter({ clientWantsUsage: false }), events);
    const chunks = dataOf(out);
    assert.ok(chunks.every((chunk) => !("usage" in chunk)));
    const text = chunks.map((chunk) => (chunk.choices as { delta: { content?: string } }[])[0]?.delta.content ?? "");
    assert.equal(text.join(""), SCRUBBED);
  });

  void it("OpenAI chat: a key sent three characters a chunk in a legacy function_call or an audio transcript is scrubbed", () => {
    const head = { id: "chatcmpl-Bx9", object: "chat.completion.chunk", created: 1, model: "gpt-4.1-mini" };
    const nested = {
      function_call: (piece: string): Json => ({ function_call: { arguments: piece } }),
      audio: (piece: string): Json => ({ audio: { transcript: piece } }),
    };
    for (const [parent, deltaOf] of Object.entries(nested)) {
      const events = [
        ...pieces(ANSWER).map((piece) =>
          sse({ ...head, choices: [{ index: 0, delta: deltaOf(piece), finish_reason: null }] }),
        ),
        sse({ ...head, choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }),
        "data: [DONE]\n\n",
      ];
      const out = throughProxy(openAiChatCompletions, new OpenAiStreamMeter({ clientWantsUsage: true }), events);
      const text = dataOf(out)
        .map((chunk) => (chunk.choices as { delta: Record<string, Record<string, string> | undefined> }[])[0]?.delta)
        .map((delta) => Object.values(delta?.[parent] ?? {}).join(""))
        .join("");
      assert.equal(text, SCRUBBED, parent);
    }
  });

  void it("Anthropic: a key sent three characters a delta is scrubbed, and what is held goes out before the block stops", () => {
    const events = [
      sse({ type: "message_start", message: { id: "msg_1", model: "claude", usage: { input_tokens: 5 } } }),
      sse({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
      ...pieces(ANSWER).map((piece) => anthropicDelta(piece)),
      sse({ type: "content_block_stop", index: 0 }),
      sse({ type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 20 } }),
      sse({ type: "message_stop" }),
    ];
    assert.ok(events.slice(2, -3).every((event) => readAnthropicTextDelta(event)));
    const out = throughProxy(anthropicMessages, new AnthropicStreamMeter(), events);
    const deltas = dataOf(out).filter((data) => data.type === "content_block_delta");
    assert.equal(deltas.map((data) => (data.delta as { text: string }).text).join(""), SCRUBBED);
    const stop = dataOf(out).findIndex((data) => data.type === "content_block_stop");
    assert.equal(dataOf(out)[stop - 1]?.type, "content_block_delta", "the held text goes out just before the stop");
  });

  void it("Responses: a key sent three characters a delta is scrubbed, and what is held goes out before the text's done", () => {
    const done = { type: "response.output_text.done", output_index: 1, content_index: 0, text: ANSWER };
    const events = [
      ...pieces(ANSWER).map((piece, i) => responsesDelta(piece, { part: "content_index", sequence: i })),
      sse(done, done.type),
      sse({ type: "response.completed", response: { id: "resp_1", model: "gpt", status: "completed" } }),
    ];
    assert.ok(events.slice(0, -2).every((event) => readResponsesTextDelta(event)));
    const out = throughProxy(openAiResponses, new ResponsesStreamMeter(), events);
    const data = dataOf(out);
    const deltas = data.filter((event) => event.type === "response.output_text.delta");
    assert.equal(deltas.map((event) => event.delta).join(""), SCRUBBED);
    assert.equal(data.at(-2)?.text, SCRUBBED, "the done event's whole text is scrubbed too");
    assert.equal(out.includes(KEY.slice(0, 8)), false);
  });

  void it("Responses: a key sent three characters a delta in an audio answer's transcript is scrubbed", () => {
    // The shape OpenAI's SDK types: a delta and a sequence number, no output item or content part.
    const type = "response.audio.transcript.delta";
    const events = [
      ...pieces(ANSWER).map((delta, i) => sse({ type, delta, sequence_number: i }, type)),
      sse({ type: "response.audio.transcript.done", sequence_number: 99 }, "response.audio.transcript.done"),
      sse({ type: "response.completed", response: { id: "resp_1", model: "gpt", status: "completed" } }),
    ];
    const out = throughProxy(openAiResponses, new ResponsesStreamMeter(), events);
    const deltas = dataOf(out).filter((event) => event.type === type);
    assert.equal(deltas.map((event) => event.delta).join(""), SCRUBBED);
    const done = dataOf(out).findIndex((event) => event.type === "response.audio.transcript.done");
    assert.equal(dataOf(out)[done - 1]?.type, type, "the held text goes out just before the transcript's done");
  });

  void it("Responses: the events that repeat a text streamed clean are still scrubbed wherever else they hold a key", () => {
    const answer = "A clean answer, long enough to be remembered once it has streamed whole. ";
    const done = { type: "response.output_text.done", output_index: 1, content_index: 0, text: answer };
    const part = { type: "response.content_part.done", output_index: 1, content_index: 0 };
    const events = [
      ...pieces(answer).map((piece, i) => responsesDelta(piece, { part: "content_index", sequence: i })),
      sse(done, done.type),
      // The same text beside a key, and a text that differs from what streamed.
      sse({ ...part, part: { type: "output_text", text: answer, annotations: [{ title: KEY }] } }, part.type),
      sse({
        type: "response.completed",
        response: { id: "resp_1", status: "completed", output: [{ content: [{ text: `${answer}${KEY}` }] }] },
      }),
    ];
    const out = throughProxy(openAiResponses, new ResponsesStreamMeter(), events);
    const data = dataOf(out);
    assert.equal(data.at(-3)?.text, answer, "the done event goes out as it came");
    assert.equal(out.includes(KEY.slice(0, 8)), false, out);
    assert.equal(JSON.stringify(data.at(-2)).includes(answer), true, "the repeated text is kept");
  });

  void it("the meters count the characters a parse counts", () => {
    const cases: [StreamMeter, StreamMeter, string[], string][] = [
      [
        new OpenAiStreamMeter({ clientWantsUsage: true }),
        new OpenAiStreamMeter({ clientWantsUsage: true }),
        [chatChunk("abc"), chatChunk("d\\e", { field: "reasoning_content" }), chatChunk("😀", { field: "refusal" })],
        '"choices"',
      ],
      [
        new AnthropicStreamMeter(),
        new AnthropicStreamMeter(),
        [
          anthropicDelta("abc"),
          anthropicDelta("d\\e", { field: "thinking" }),
          anthropicDelta("{}", { field: "partial_json" }),
        ],
        '"index"',
      ],
      [
        new ResponsesStreamMeter(),
        new ResponsesStreamMeter(),
        [
          responsesDelta("abc"),
          responsesDelta("d\\e", { type: "response.refusal.delta" }),
          responsesDelta("x", { type: "response.other.delta" }),
        ],
        '"output_index"',
      ],
    ];
    const first = sse({ id: "chatcmpl-Bx9", model: "gpt", choices: [{ index: 0, delta: { role: "assistant" } }] });
    for (const [fast, parsed, events, member] of cases) {
      fast.onEvent(first);
      parsed.onEvent(first);
      for (const event of events) {
        fast.onEvent(event);
        // The same event with a space no reader takes: parsed.
        const spaced = event.replace(member, ` ${member}`);
        assert.equal(
          readChatTextDelta(spaced) ?? readAnthropicTextDelta(spaced) ?? readResponsesTextDelta(spaced),
          undefined,
        );
        parsed.onEvent(spaced);
      }
      assert.deepEqual(fast.reading(0), parsed.reading(0));
      assert.ok(fast.reading(0).usage.output > 0);
    }
  });
});
