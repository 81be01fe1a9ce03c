// A provider that echoes the proxy's key back in the shapes that slip past a
// per-event scrub: a few characters per streamed delta, spaced out with white
// space, written into a tool call's JSON. Through the real proxy, on every wire
// format, streamed and whole: the client never sees the key, and sees the
// rest of the answer exactly.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { createScrubber, REDACTED } from "@oz0/serving";
import { sseData } from "../src/sse-event-splitter.js";
import { startEchoingUpstream, type EchoAnswer, type EchoingUpstream } from "./echoing-upstream.js";
import { PLANTED_KEY, post, startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/**
 * Every 8-character window of the key found in `text`, read through white
 * space and JSON-escaped white space, escaped once or more (a tool call's
 * arguments are JSON inside a JSON string): a key spaced out is still a leak.
 */
function leaks(text: string): string[] {
  const squeezed = text.replace(/\\+[nrt]|\s/g, "");
  const found: string[] = [];
  for (let i = 0; i + 8 <= PLANTED_KEY.length; i += 1) {
    const window = PLANTED_KEY.slice(i, i + 8);
    if (squeezed.includes(window)) found.push(window);
  }
  return found;
}

interface Case {
  name: string;
  answer: EchoAnswer;
  /** The text the client must end up with. */
  text: string;
  /** The tool call's parsed input the client must end up with. */
  toolInput?: unknown;
}

const spaced = [...PLANTED_KEY].join(" ");
const CASES: Case[] = [
  {
    name: "the key in 7-character deltas",
    answer: { text: ["Here it is: ", ...pieces(PLANTED_KEY, 7), " (done)."] },
    text: `Here it is: ${REDACTED} (done).`,
  },
  {
    name: "the key one character per delta",
    answer: { text: ["key=", ...PLANTED_KEY, ";"] },
    text: `key=${REDACTED};`,
  },
  {
    name: "the key with a space between its characters, in 5-character deltas",
    answer: { text: pieces(`spaced: ${spaced} end`, 5) },
    text: `spaced: ${REDACTED} end`,
  },
  {
    name: "the key with newlines and tabs between its characters, one delta each",
    answer: { text: ["[", ...[...PLANTED_KEY].join("\n\t"), "]"] },
    text: `[${REDACTED}]`,
  },
  {
    name: "the key in a tool call's JSON: 7-character deltas, spaced, and JSON-escaped newlines",
    answer: {
      text: ["Calling the tool."],
      toolJson: pieces(
        JSON.stringify({ plain: PLANTED_KEY, spaced, lines: [...PLANTED_KEY].join("\n"), after: "kept" }),
        7,
      ),
    },
    text: "Calling the tool.",
    toolInput: { plain: REDACTED, spaced: REDACTED, lines: REDACTED, after: "kept" },
  },
  {
    name: "ordinary text and JSON, which pass whole and unchanged",
    answer: {
      text: pieces(
        "An answer with sk- and ant- and api03 in it, words of the key's letters, but no run of 8: PLANTE d. ",
        3,
      ),
      toolJson: pieces(
        JSON.stringify({ path: "src/a.ts", content: 'line 1\nline 2\t"quoted" \\ back\\slash \u00e9' }),
        7,
      ),
    },
    text: "An answer with sk- and ant- and api03 in it, words of the key's letters, but no run of 8: PLANTE d. ",
    toolInput: { path: "src/a.ts", content: 'line 1\nline 2\t"quoted" \\ back\\slash \u00e9' },
  },
];

/** The text and tool input a client reads from a raw Anthropic answer, streamed or whole. */
function readAnthropic(raw: string, stream: boolean): { text: string; toolInput: unknown } {
  if (!stream) {
    const message = JSON.parse(raw) as { content: { type: string; text?: string; input?: unknown }[] };
    return {
      text: message.content.find((b) => b.type === "text")?.text ?? "",
      toolInput: message.content.find((b) => b.type === "tool_use")?.input,
    };
  }
  let text = "";
  let json = "";
  const types: string[] = [];
  for (const event of raw.split("\n\n")) {
    const data = sseData(event);
    if (!data) continue;
    const parsed = JSON.parse(data) as { type: string; delta?: { type: string; text?: string; partial_json?: string } };
    types.push(parsed.type);
    if (parsed.type !== "content_block_delta") continue;
    if (parsed.delta?.type === "text_delta") text += parsed.delta.text;
    if (parsed.delta?.type === "input_json_delta") json += parsed.delta.partial_json;
  }
  assert.equal(types.at(-1), "message_stop", "the stream ended as a complete message");
  return { text, toolInput: json ? JSON.parse(json) : undefined };
}

/** The same from a raw OpenAI answer. */
function readOpenAi(raw: string, stream: boolean): { text: string; toolInput: unknown } {
  if (!stream) {
    const completion = JSON.parse(raw) as {
      choices: { message: { content: string; tool_calls?: { function: { arguments: string } }[] } }[];
    };
    const args = completion.choices[0]!.message.tool_calls?.[0]?.function.arguments;
    return { text: completion.choices[0]!.message.content, toolInput: args ? JSON.parse(args) : undefined };
  }
  let text = "";
  let args = "";
  let done = false;
  for (const event of raw.split("\n\n")) {
    const data = sseData(event);
    if (!data) continue;
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const chunk = JSON.parse(data) as {
      choices: { delta: { content?: string; tool_calls?: { function?: { arguments?: string } }[] } }[];
    };
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      for (const call of choice.delta.tool_calls ?? []) args += call.function?.arguments ?? "";
    }
  }
  assert.ok(done, "the stream ended with [DONE]");
  return { text, toolInput: args ? JSON.parse(args) : undefined };
}

/** The same from a raw OpenAI Responses answer. */
function readResponses(raw: string, stream: boolean): { text: string; toolInput: unknown } {
  type Item = { type: string; content?: { text: string }[]; arguments?: string };
  if (!stream) {
    const response = JSON.parse(raw) as { output: Item[] };
    const args = response.output.find((item) => item.type === "function_call")?.arguments;
    return {
      text: response.output.find((item) => item.type === "message")?.content?.[0]?.text ?? "",
      toolInput: args ? JSON.parse(args) : undefined,
    };
  }
  let text = "";
  let args = "";
  const types: string[] = [];
  for (const event of raw.split("\n\n")) {
    const data = sseData(event);
    if (!data) continue;
    const parsed = JSON.parse(data) as { type: string; delta?: string };
    types.push(parsed.type);
    if (parsed.type === "response.output_text.delta") text += parsed.delta;
    if (parsed.type === "response.function_call_arguments.delta") args += parsed.delta;
  }
  assert.equal(types.at(-1), "response.completed", "the stream ended with the whole response");
  return { text, toolInput: args ? JSON.parse(args) : undefined };
}

/** How a client calls each wire format and reads its answer. */
const WIRES = {
  anthropic: {
    url: (e: SessionEndpoint) => `${e.anthropicBaseUrl}/v1/messages`,
    body: (name: string, stream: boolean) => ({
      model: "claude-sonnet-5",
      max_tokens: 100,
      stream,
      messages: [{ role: "user", content: name }],
    }),
    auth: (e: SessionEndpoint): Record<string, string> => ({ "x-api-key": e.token }),
    read: readAnthropic,
  },
  openai: {
    url: (e: SessionEndpoint) => `${e.openaiBaseUrl}/chat/completions`,
    body: (name: string, stream: boolean) => ({
      model: "gpt-4o",
      max_tokens: 100,
      stream,
      messages: [{ role: "user", content: name }],
    }),
    auth: (e: SessionEndpoint): Record<string, string> => ({ authorization: `Bearer ${e.token}` }),
    read: readOpenAi,
  },
  "openai-responses": {
    url: (e: SessionEndpoint) => `${e.openaiBaseUrl}/responses`,
    body: (name: string, stream: boolean) => ({
      model: "gpt-5",
      max_output_tokens: 100,
      stream,
      input: [{ role: "user", content: name }],
    }),
    auth: (e: SessionEndpoint): Record<string, string> => ({ authorization: `Bearer ${e.token}` }),
    read: readResponses,
  },
} as const;

void describe("a key echoed back in pieces", () => {
  let upstream: EchoingUpstream;
  let fx: ProxyFixture;
  let endpoint: SessionEndpoint;
  // Each request names its case in the user message; the upstream answers with that case.
  const answerFor = (body: Record<string, unknown>): EchoAnswer => {
    const name = (((body.messages ?? body.input) as { content: string }[] | undefined)?.[0]?.content ?? "").toString();
    const found = CASES.find((c) => c.name === name);
    assert.ok(found, `no case named ${name}`);
    return found.answer;
  };

  before(async () => {
    upstream = await startEchoingUpstream({ answer: ({ body }) => answerFor(body) });
    fx = await startFixture({
      turns: [],
      config: {
        providers: [
          {
            name: "anthropic",
            baseUrl: upstream.url,
            keySecret: "ANTHROPIC_API_KEY",
            prices: { "*": { input: 3, output: 15 } },
          },
          {
            name: "openai",
            baseUrl: upstream.url,
            keySecret: "OPENAI_API_KEY",
            auth: "bearer",
            prices: { "*": { input: 3, output: 15 } },
          },
        ],
      },
    });
    endpoint = await fx.session();
  });
  after(async () => {
    await fx.close();
    await upstream.close();
  });

  void it("count_tokens, passed through: the key echoed in its content type", async () => {
    const response = await post(
      `${endpoint.anthropicBaseUrl}/v1/messages/count_tokens`,
      {
        model: "claude-test",
        messages: [{ role: "user", content: "count these" }],
      },
      { ...endpoint.headers, ...WIRES.anthropic!.auth(endpoint) },
    );
    assert.equal(response.status, 200, response.text);
    assert.deepEqual(JSON.parse(response.text), { input_tokens: 10 });
    const contentType = response.headers.get("content-type") ?? "";
    assert.match(contentType, /^application\/json; echo=/);
    assert.deepEqual(leaks(contentType), []);
  });

  for (const [wire, client] of Object.entries(WIRES)) {
    for (const stream of [true, false]) {
      for (const c of CASES) {
        void it(`${wire}, ${stream ? "streamed" : "whole"}: ${c.name}`, async () => {
          const response = await post(client.url(endpoint), client.body(c.name, stream), {
            ...endpoint.headers,
            ...client.auth(endpoint),
          });
          assert.equal(response.status, 200, response.text);
          assert.deepEqual(leaks(response.text), [], "no run of the key in the bytes the client got");
          const read = client.read(response.text, stream);
          assert.deepEqual(
            leaks(read.text + JSON.stringify(read.toolInput ?? null)),
            [],
            "no run of the key in what the client reads",
          );
          assert.equal(read.text, c.text);
          assert.deepEqual(read.toolInput, c.toolInput);
        });
      }
    }
  }

  void it("the official SDKs read the rewritten streams: the scrubbed text, the tool input, the usage", async () => {
    const toolCase = CASES[4]!;
    const anthropic = new Anthropic({
      baseURL: endpoint.anthropicBaseUrl,
      apiKey: endpoint.token,
      defaultHeaders: endpoint.headers,
      maxRetries: 0,
    });
    const message = await anthropic.messages
      .stream({ model: "claude-sonnet-5", max_tokens: 100, messages: [{ role: "user", content: toolCase.name }] })
      .finalMessage();
    assert.deepEqual(
      message.content.map((b) => (b.type === "text" ? b.text : b.type === "tool_use" ? b.input : b.type)),
      [toolCase.text, toolCase.toolInput],
    );
    assert.equal(message.usage.output_tokens, 20);

    const openai = new OpenAI({
      baseURL: endpoint.openaiBaseUrl,
      apiKey: endpoint.token,
      defaultHeaders: endpoint.headers,
      maxRetries: 0,
    });
    for (const c of [CASES[0]!, toolCase]) {
      const completion = await openai.chat.completions
        .stream({
          model: "gpt-4o",
          stream_options: { include_usage: true },
          messages: [{ role: "user", content: c.name }],
        })
        .finalChatCompletion();
      const choice = completion.choices[0]!;
      assert.equal(choice.message.content, c.text);
      const call = choice.message.tool_calls?.[0];
      assert.deepEqual(call?.type === "function" ? JSON.parse(call.function.arguments) : undefined, c.toolInput);
      assert.equal(completion.usage?.completion_tokens, 20);

      let streamed = "";
      let args = "";
      const responseStream = openai.responses.stream({ model: "gpt-5", input: [{ role: "user", content: c.name }] });
      responseStream.on("response.output_text.delta", (event) => (streamed += event.delta));
      responseStream.on("response.function_call_arguments.delta", (event) => (args += event.delta));
      const response = await responseStream.finalResponse();
      assert.equal(streamed, c.text);
      assert.equal(response.output_text, c.text);
      assert.deepEqual(args ? JSON.parse(args) : undefined, c.toolInput);
      const functionCall = response.output.find((item) => item.type === "function_call");
      assert.deepEqual(
        functionCall?.type === "function_call" ? JSON.parse(functionCall.arguments) : undefined,
        c.toolInput,
      );
      assert.equal(response.usage?.output_tokens, 20);
    }
  });

  void it("meters what the provider reported, whatever was held back or scrubbed", async () => {
    const calls = await fx.proxy.store.listCalls(endpoint.job);
    assert.ok(calls.length > 0);
    assert.ok(calls.every((call) => call.outcome === "ok" && call.usage.output === 20 && !call.estimated));
  });
});

void describe("the scrubber on its own", () => {
  const scrubber = createScrubber(PLANTED_KEY);

  void it("sends a streamed text exactly as a whole-text scrub would, however the deltas are cut", () => {
    // A small deterministic generator: the same cases every run.
    let seed = 7;
    const random = (): number => (seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648) / 2_147_483_648;
    const shapes = [
      () => PLANTED_KEY,
      () => spaced,
      () => [...PLANTED_KEY].join("\\n"),
      () => PLANTED_KEY.slice(0, 4 + Math.floor(random() * 12)),
      () => PLANTED_KEY.slice(20, 28 + Math.floor(random() * 20)),
      () => "ordinary words, ",
      () => " ".repeat(Math.floor(random() * 40)),
      () => "\\u0073k-ant-api03-PL",
      () => "a\\",
      () => "\\u00",
    ];
    for (let n = 0; n < 3_000; n += 1) {
      let text = "";
      for (let i = 1 + Math.floor(random() * 6); i > 0; i -= 1) text += shapes[Math.floor(random() * shapes.length)]!();
      const held = scrubber.held();
      let streamed = "";
      for (let at = 0; at < text.length;) {
        const size = 1 + Math.floor(random() * 9);
        streamed += held.push(text.slice(at, at + size));
        at += size;
      }
      streamed += held.flush();
      assert.equal(streamed, scrubber.text(text), JSON.stringify(text));
    }
  });

  void it("holds back only the run of key characters a delta ends with, and sends ordinary text at once", () => {
    const held = scrubber.held();
    // None of these characters is in the key: nothing to wait for.
    assert.equal(held.push("Hi, you! "), "Hi, you! ");
    // "sk-" may be a key's start: it waits (with the space before it); the word after it shows it is not.
    assert.equal(held.push("Use sk-"), "Use");
    assert.equal(held.push("lite."), " sk-lite.");
    assert.equal(held.push(PLANTED_KEY.slice(0, 7)), "");
    assert.equal(held.push(PLANTED_KEY.slice(7, 14)), "");
    assert.equal(held.flush(), REDACTED);
  });

  void it("reads runs through white space and JSON escapes, and leaves other text alone", () => {
    assert.equal(scrubber.text(`a ${[...PLANTED_KEY].join("  ")} b`), `a ${REDACTED} b`);
    assert.equal(scrubber.text(`a ${[...PLANTED_KEY].join("\u200b")} b`), `a ${REDACTED} b`, "zero-width spaces");
    assert.equal(scrubber.text(`"${[...PLANTED_KEY].join("\\n")}"`), `"${REDACTED}"`);
    assert.equal(scrubber.text(`\\u0073\\u006b${PLANTED_KEY.slice(2)}`), REDACTED);
    // A gap longer than 32 ends a run: two runs of 8 or more are still two runs.
    assert.equal(
      scrubber.text(`${PLANTED_KEY.slice(0, 10)}${" ".repeat(40)}${PLANTED_KEY.slice(10)}`),
      `${REDACTED}${" ".repeat(40)}${REDACTED}`,
    );
    assert.equal(
      scrubber.text(`${PLANTED_KEY.slice(0, 7)}${" ".repeat(40)}${PLANTED_KEY.slice(7, 14)}`),
      `${PLANTED_KEY.slice(0, 7)}${" ".repeat(40)}${PLANTED_KEY.slice(7, 14)}`,
    );
    const json = JSON.stringify({ text: "nothing here", n: 1.5, list: [true, null] });
    assert.equal(scrubber.json(json), json);
    assert.equal(
      scrubber.json(JSON.stringify({ [PLANTED_KEY]: [...PLANTED_KEY].join("\r\n") })),
      JSON.stringify({ [REDACTED]: REDACTED }),
    );
    // JSON inside a JSON string (a tool call's arguments) escapes its escapes: the key spelt with
    // \u escapes there is \\u0073… in the document, found in the decoded string (a scan of the raw
    // text reads one level of escapes), whether the backslash is escaped as \\ or as \u005c.
    const spelt = [...PLANTED_KEY].map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`).join("");
    const nested = JSON.stringify({ arguments: `{"key":"${spelt}"}` });
    assert.ok(nested.includes("\\\\u0073"));
    const scrubbedArguments = JSON.stringify({ arguments: `{"key":"${REDACTED}"}` });
    assert.equal(scrubber.json(nested), scrubbedArguments);
    assert.equal(scrubber.json(nested.replaceAll("\\\\", "\\u005c")), scrubbedArguments);
    assert.equal(createScrubber(undefined).active, false);
    assert.equal(createScrubber("short").text("short"), "short");
  });
});
