import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { modelTurnsIn, startScriptedModel, type ScriptedModel } from "../src/testing/scripted-model.js";

const weather = { name: "get_weather", input: { city: "Paris", unit: "celsius" } };

void describe("scripted model with the real @anthropic-ai/sdk", () => {
  let model: ScriptedModel;
  let client: Anthropic;
  before(async () => {
    model = await startScriptedModel({
      turns: [
        {
          text: "Hello there, this is a scripted answer.",
          usage: { input: 10, output: 7, cacheRead: 3, cacheWrite: 2 },
        },
        { text: "Let me check.", toolCalls: [weather] },
        { text: "streamed text that is long enough to come in several deltas", usage: { input: 11, output: 13 } },
        { fail: { status: 529 } },
      ],
    });
    client = new Anthropic({ baseURL: model.url, apiKey: "sk-test", maxRetries: 0 });
  });
  after(() => model.close());

  void it("answers a non-streaming call with the scripted text and usage", async () => {
    const message = await client.messages.create({
      model: "claude-x",
      max_tokens: 100,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.deepEqual(message.content, [{ type: "text", text: "Hello there, this is a scripted answer." }]);
    assert.equal(message.stop_reason, "end_turn");
    assert.equal(message.usage.input_tokens, 10);
    assert.equal(message.usage.output_tokens, 7);
    assert.equal(message.usage.cache_read_input_tokens, 3);
    assert.equal(message.usage.cache_creation_input_tokens, 2);
    const headers = model.requests[0]?.headers ?? {};
    assert.ok(headers["x-api-key"] === "sk-test" || headers.authorization === "Bearer sk-test");
    assert.equal(model.requests[0]?.body.messages[0].content, "hi");
  });

  void it("streams tool calls as input_json_delta that the SDK reassembles", async () => {
    const stream = client.messages.stream({
      model: "claude-x",
      max_tokens: 100,
      messages: [{ role: "user", content: "weather?" }],
      tools: [{ name: "get_weather", input_schema: { type: "object" } }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, "tool_use");
    const tool = final.content.find((b) => b.type === "tool_use");
    assert.ok(tool && tool.type === "tool_use");
    assert.equal(tool.name, "get_weather");
    assert.deepEqual(tool.input, weather.input);
    assert.equal((final.content[0] as { text: string }).text, "Let me check.");
  });

  void it("streams text and reports message_start and message_delta usage", async () => {
    const stream = await client.messages.create({
      model: "claude-x",
      max_tokens: 100,
      stream: true,
      messages: [{ role: "user", content: "go" }],
    });
    const types: string[] = [];
    let text = "";
    let startInput = -1;
    let finalOutput = -1;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === "message_start") startInput = event.message.usage.input_tokens;
      if (event.type === "content_block_delta" && event.delta.type === "text_delta") text += event.delta.text;
      if (event.type === "message_delta") finalOutput = event.usage.output_tokens;
    }
    assert.equal(text, "streamed text that is long enough to come in several deltas");
    assert.equal(startInput, 11);
    assert.equal(finalOutput, 13);
    assert.equal(types[0], "message_start");
    assert.equal(types.at(-1), "message_stop");
    assert.ok(types.includes("message_delta"));
  });

  void it("fails with the scripted status and an Anthropic error body", async () => {
    await assert.rejects(
      client.messages.create({ model: "claude-x", max_tokens: 100, messages: [{ role: "user", content: "x" }] }),
      (error: unknown) => error instanceof Anthropic.APIError && error.status === 529,
    );
  });

  void it("answers count_tokens without consuming a turn, then says clearly when the script ran out", async () => {
    const used = model.turnsUsed;
    const counted = await client.messages.countTokens({
      model: "claude-x",
      messages: [{ role: "user", content: "count me please" }],
    });
    assert.ok(counted.input_tokens > 0);
    assert.equal(model.turnsUsed, used);
    await assert.rejects(
      client.messages.create({ model: "claude-x", max_tokens: 100, messages: [{ role: "user", content: "x" }] }),
      (error: unknown) =>
        error instanceof Anthropic.APIError && error.status === 400 && /no turn left/.test(error.message),
    );
  });

  void it("sums the usage it reported", () => {
    const served = model.tokensServed;
    assert.equal(served.cacheRead, 3);
    assert.equal(served.input >= 10 + 11, true);
    assert.equal(served.total, served.input + served.output + served.cacheRead + served.cacheWrite);
  });
});

void describe("scripted model with the real openai client", () => {
  let model: ScriptedModel;
  let client: OpenAI;
  before(async () => {
    model = await startScriptedModel({
      turns: [
        { text: "plain answer", usage: { input: 5, output: 2, cacheRead: 1 } },
        { toolCalls: [weather, { id: "call_fixed", name: "lookup", input: { q: "x" } }] },
        { text: "streaming without usage" },
        { fail: { status: 429, headers: { "retry-after": "0" } } },
      ],
    });
    client = new OpenAI({ baseURL: `${model.url}/v1`, apiKey: "sk-test", maxRetries: 0 });
  });
  after(() => model.close());

  void it("answers a non-streaming chat completion with usage", async () => {
    const completion = await client.chat.completions.create({
      model: "gpt-x",
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(completion.choices[0]?.message.content, "plain answer");
    assert.equal(completion.choices[0]?.finish_reason, "stop");
    assert.equal(completion.usage?.prompt_tokens, 6);
    assert.equal(completion.usage?.prompt_tokens_details?.cached_tokens, 1);
    assert.equal(completion.usage?.completion_tokens, 2);
    assert.equal(model.requests[0]?.headers.authorization, "Bearer sk-test");
  });

  void it("streams tool_calls deltas and the usage chunk when include_usage is set", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-x",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "hi" }],
    });
    const calls: { id?: string; name: string; args: string }[] = [];
    let usageChunks = 0;
    let finish: string | null = null;
    for await (const chunk of stream) {
      if (chunk.usage) usageChunks += 1;
      const choice = chunk.choices[0];
      if (choice?.finish_reason) finish = choice.finish_reason;
      for (const delta of choice?.delta.tool_calls ?? []) {
        const slot = (calls[delta.index] ??= { name: "", args: "" });
        if (delta.id) slot.id = delta.id;
        if (delta.function?.name) slot.name = delta.function.name;
        slot.args += delta.function?.arguments ?? "";
      }
    }
    assert.equal(finish, "tool_calls");
    assert.equal(usageChunks, 1);
    assert.equal(calls.length, 2);
    assert.deepEqual(JSON.parse(calls[0]!.args), weather.input);
    assert.equal(calls[1]!.id, "call_fixed");
    assert.equal(calls[1]!.name, "lookup");
  });

  void it("sends no usage chunk when the client did not ask for one", async () => {
    const stream = await client.chat.completions.create({
      model: "gpt-x",
      stream: true,
      messages: [{ role: "user", content: "hi" }],
    });
    let text = "";
    let sawUsage = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) sawUsage = true;
    }
    assert.equal(text, "streaming without usage");
    assert.equal(sawUsage, false);
  });

  void it("fails with 429 and the scripted retry-after header", async () => {
    await assert.rejects(
      client.chat.completions.create({ model: "gpt-x", messages: [{ role: "user", content: "hi" }] }),
      (error: unknown) =>
        error instanceof OpenAI.APIError && error.status === 429 && error.headers?.get("retry-after") === "0",
    );
  });
});

void describe("scripted model with the real openai client: the Responses API", () => {
  let model: ScriptedModel;
  let client: OpenAI;
  before(async () => {
    model = await startScriptedModel({
      turns: [
        { text: "plain answer", usage: { input: 5, output: 2, cacheRead: 1, reasoning: 1 } },
        {
          text: "Checking the weather now, one moment please.",
          toolCalls: [weather, { id: "call_fixed", name: "lookup", input: { q: "x" } }],
          usage: { input: 9, output: 8 },
        },
        {
          text: "a long text that will be cut somewhere in the middle of it",
          cutMidStream: true,
          usage: { input: 9, output: 20 },
        },
        { text: "stopped", stopReason: "max_tokens" },
        { fail: { status: 400, message: "scripted refusal" } },
      ],
    });
    client = new OpenAI({ baseURL: `${model.url}/v1`, apiKey: "sk-test", maxRetries: 0 });
  });
  after(() => model.close());

  void it("answers a whole response with its output text and usage, cached tokens inside input_tokens", async () => {
    const response = await client.responses.create({ model: "gpt-x", input: "hi" });
    assert.equal(response.output_text, "plain answer");
    assert.equal(response.status, "completed");
    assert.equal(response.usage?.input_tokens, 6);
    assert.equal(response.usage?.input_tokens_details.cached_tokens, 1);
    assert.equal(response.usage?.output_tokens, 2);
    assert.equal(response.usage?.output_tokens_details.reasoning_tokens, 1);
    assert.equal(model.requests[0]?.wire, "openai-responses");
    assert.equal(model.requests[0]?.headers.authorization, "Bearer sk-test");
  });

  void it("streams text and function calls as typed events the SDK assembles, usage in response.completed", async () => {
    const stream = client.responses.stream({ model: "gpt-x", input: [{ role: "user", content: "weather?" }] });
    const sequence: number[] = [];
    const types: string[] = [];
    stream.on("event", (event) => {
      sequence.push(event.sequence_number);
      types.push(event.type);
    });
    const response = await stream.finalResponse();
    assert.deepEqual(
      sequence,
      sequence.map((_, i) => i),
      "sequence numbers count from 0",
    );
    assert.deepEqual(types.slice(0, 2), ["response.created", "response.in_progress"]);
    assert.equal(types.at(-1), "response.completed");
    assert.equal(response.output_text, "Checking the weather now, one moment please.");
    const calls = response.output.flatMap((item) => (item.type === "function_call" ? [item] : []));
    assert.deepEqual(
      calls.map((c) => [c.call_id, c.name, JSON.parse(c.arguments)]),
      [
        ["call_scripted_2_0", "get_weather", weather.input],
        ["call_fixed", "lookup", { q: "x" }],
      ],
    );
    assert.equal(response.usage?.output_tokens, 8);
  });

  void it("cuts a stream mid-way, having reported no usage", async () => {
    const served = model.tokensServed;
    let received = "";
    await assert.rejects(async () => {
      const stream = await client.responses.create({ model: "gpt-x", input: "x", stream: true });
      for await (const event of stream) if (event.type === "response.output_text.delta") received += event.delta;
    });
    assert.ok(
      received.length > 0 && received.length < "a long text that will be cut somewhere in the middle of it".length,
    );
    assert.deepEqual(model.tokensServed, served, "usage comes with the response's end only");
  });

  void it("marks a turn that stopped at its output limit incomplete, and fails in OpenAI's error shape", async () => {
    const stream = client.responses.stream({ model: "gpt-x", input: "x" });
    const types: string[] = [];
    stream.on("event", (event) => types.push(event.type));
    const response = await stream.finalResponse();
    assert.equal(response.status, "incomplete");
    assert.equal(response.incomplete_details?.reason, "max_output_tokens");
    assert.equal(types.at(-1), "response.incomplete");
    await assert.rejects(
      client.responses.create({ model: "gpt-x", input: "x" }),
      (error: unknown) => error instanceof OpenAI.BadRequestError && error.message.includes("scripted refusal"),
    );
  });

  void it("counts the model's turns in a Responses input: each run of its own items between the caller's", () => {
    const input = [
      { role: "user", content: "x" },
      { type: "reasoning", summary: [] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "looking" }] },
      { type: "function_call", call_id: "c1", name: "t", arguments: "{}" },
      { type: "function_call_output", call_id: "c1", output: "done" },
      { role: "assistant", content: "and so" },
      { role: "user", content: "go on" },
    ];
    assert.equal(modelTurnsIn({ wire: "openai-responses", body: { input } }), 2);
    assert.equal(modelTurnsIn({ wire: "openai-responses", body: { input: "just text" } }), 0);
    assert.equal(
      modelTurnsIn({ wire: "openai-chat-completions", body: { messages: [{ role: "user" }, { role: "assistant" }] } }),
      1,
    );
    assert.equal(modelTurnsIn({ wire: "anthropic-count-tokens", body: { messages: [{ role: "assistant" }] } }), 0);
  });
});

void describe("scripted model edge cases", () => {
  void it("cuts a stream mid-way and the client sees the connection die", async () => {
    const model = await startScriptedModel({
      turns: [
        {
          text: "a long text that will be cut somewhere in the middle of it",
          cutMidStream: true,
          usage: { input: 9, output: 20 },
        },
      ],
    });
    try {
      const client = new Anthropic({ baseURL: model.url, apiKey: "k", maxRetries: 0 });
      let received = "";
      await assert.rejects(async () => {
        const stream = await client.messages.create({
          model: "m",
          max_tokens: 10,
          stream: true,
          messages: [{ role: "user", content: "x" }],
        });
        for await (const event of stream) {
          if (event.type === "content_block_delta" && event.delta.type === "text_delta") received += event.delta.text;
        }
      });
      assert.ok(
        received.length > 0 && received.length < "a long text that will be cut somewhere in the middle of it".length,
      );
      assert.equal(model.tokensServed.input, 9);
      assert.equal(model.tokensServed.output, 1);
    } finally {
      await model.close();
    }
  });

  void it("serves paths without /v1, a function script, and Claude Code style side calls without consuming turns", async () => {
    const seen: string[] = [];
    const model = await startScriptedModel({
      turns: (request) => {
        seen.push(request.wire);
        return { text: `turn ${request.turn}` };
      },
    });
    try {
      const post = (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Response> =>
        fetch(`${model.url}${path}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: JSON.stringify(body),
        });
      type Answer = { choices: { message: { content: string } }[]; content: { text: string }[] };
      const ask = async (path: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> =>
        (await (await post(path, body, headers)).json()) as Answer;
      const plain = await ask("/chat/completions", { model: "m", messages: [{ role: "user", content: "x" }] });
      assert.equal(plain.choices[0]?.message.content, "turn 0");
      const probe = await ask("/v1/messages?beta=true", {
        model: "haiku",
        max_tokens: 1,
        messages: [{ role: "user", content: "quota" }],
      });
      assert.equal(probe.content[0]?.text, "OK");
      const title = await ask(
        "/messages",
        { model: "haiku", max_tokens: 512, system: "name it", messages: [{ role: "user", content: "x" }] },
        { "user-agent": "claude-cli/2.1 (external, sdk-ts)" },
      );
      assert.equal(title.content[0]?.text, "OK");
      const main = await ask(
        "/messages",
        {
          model: "sonnet",
          max_tokens: 32000,
          tools: [{ name: "Read", input_schema: {} }],
          messages: [{ role: "user", content: "x" }],
        },
        { "user-agent": "claude-cli/2.1" },
      );
      assert.equal(main.content[0]?.text, "turn 1");
      assert.deepEqual(seen, ["openai-chat-completions", "anthropic-messages"]);
      assert.deepEqual(
        model.requests.map((r) => r.sideCall),
        [false, true, true, false],
      );
      const missing = await fetch(`${model.url}/v1/nowhere`, { method: "POST" });
      assert.equal(missing.status, 404);
    } finally {
      await model.close();
    }
  });
});

void describe("scripted model with a caller that goes away", () => {
  void it("serves and counts nothing when the caller hangs up while the turn waits", async () => {
    const model = await startScriptedModel({
      turns: [
        { text: "too late", usage: { input: 40, output: 9 }, delayMs: 300 },
        { text: "on time", usage: { input: 5, output: 2 } },
      ],
    });
    try {
      const client = new Anthropic({ baseURL: model.url, apiKey: "sk-test", maxRetries: 0 });
      const abort = new AbortController();
      const hungUp = client.messages.create(
        { model: "claude-x", max_tokens: 10, messages: [{ role: "user", content: "hi" }] },
        { signal: abort.signal },
      );
      setTimeout(() => abort.abort(), 50);
      await assert.rejects(hungUp);
      await new Promise((resolve) => setTimeout(resolve, 400));
      const answered = await client.messages.create({
        model: "claude-x",
        max_tokens: 10,
        messages: [{ role: "user", content: "hi" }],
      });
      assert.deepEqual(answered.content, [{ type: "text", text: "on time" }]);
      assert.deepEqual([model.tokensServed.input, model.tokensServed.output], [5, 2]);
    } finally {
      await model.close();
    }
  });
});
