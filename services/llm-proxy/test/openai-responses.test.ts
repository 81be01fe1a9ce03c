// OpenAI's Responses API through the real proxy, called with OpenAI's own
// SDK at `{openai_base_url}/responses`, the scripted model answering as
// OpenAI does: whole answers and streams metered as the provider reported
// them (cached tokens out of input, reasoning a part of output), a stream cut
// short estimated, the budget's cut-off read by the SDK as Responses' own
// `error` event, and the proxy's own errors in OpenAI's shape.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import OpenAI from "openai";
import { ResponsesStreamMeter } from "../src/wire-formats/openai-responses.js";
import { PLANTED_KEY, PRICE, post, startFixture, type SessionEndpoint } from "./proxy-fixture.js";

const weather = { name: "get_weather", input: { city: "Paris", unit: "celsius" } };

function openai(e: SessionEndpoint): OpenAI {
  return new OpenAI({ baseURL: e.openaiBaseUrl, apiKey: e.token, defaultHeaders: e.headers, maxRetries: 0 });
}

const sse = (type: string, data: Record<string, unknown>): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

void describe("the Responses stream meter", () => {
  void it("takes usage from the response the stream ends with, cached tokens out of input and reasoning a part of output", () => {
    const meter = new ResponsesStreamMeter();
    meter.onEvent(sse("response.created", { sequence_number: 0, response: { status: "in_progress", usage: null } }));
    meter.onEvent(
      sse("response.output_text.delta", {
        sequence_number: 1,
        output_index: 0,
        content_index: 0,
        delta: "Hello there",
      }),
    );
    assert.equal(meter.complete, false);
    assert.deepEqual(meter.reading(50), {
      usage: { input: 50, output: 3, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
      estimated: true,
    });
    const usage = {
      input_tokens: 100,
      input_tokens_details: { cached_tokens: 60 },
      output_tokens: 30,
      output_tokens_details: { reasoning_tokens: 20 },
      total_tokens: 130,
    };
    meter.onEvent(sse("response.completed", { sequence_number: 2, response: { status: "completed", usage } }));
    assert.equal(meter.complete, true);
    assert.deepEqual(meter.reading(50), {
      usage: { input: 40, output: 30, cacheRead: 60, cacheWrite: 0, reasoning: 20 },
      estimated: false,
    });
    assert.equal(meter.finishReason, "completed");
  });

  void it("counts a response that failed or stopped at its output limit as a complete stream", () => {
    for (const [end, details, reason] of [
      ["response.failed", null, "failed"],
      ["response.incomplete", { reason: "max_output_tokens" }, "max_output_tokens"],
    ] as const) {
      const meter = new ResponsesStreamMeter();
      meter.onEvent(
        sse(end, {
          sequence_number: 0,
          response: {
            status: end.slice("response.".length),
            incomplete_details: details,
            usage: { input_tokens: 5, output_tokens: 1 },
          },
        }),
      );
      assert.equal(meter.complete, true, end);
      assert.equal(meter.reading(0).usage.input, 5);
      assert.equal(meter.finishReason, reason);
    }
  });
});

void describe("OpenAI Responses through the proxy", () => {
  void it("meters a whole answer as the provider reported it, with the provider's key and the bare model name", async () => {
    const fx = await startFixture({
      turns: [{ text: "a whole answer", usage: { input: 100, output: 30, cacheRead: 60, reasoning: 20 } }],
    });
    try {
      const e = await fx.session();
      const response = await openai(e).responses.create({ model: "openai/gpt-5", input: "hi", max_output_tokens: 200 });
      assert.equal(response.output_text, "a whole answer");
      assert.equal(response.status, "completed");
      assert.equal(response.usage?.input_tokens_details.cached_tokens, 60);
      const upstream = fx.model.requests[0]!;
      assert.equal(upstream.wire, "openai-responses");
      assert.equal(upstream.path, "/v1/responses");
      assert.equal(upstream.headers.authorization, `Bearer ${PLANTED_KEY}`);
      assert.equal(upstream.body.model, "gpt-5");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.wire, "openai-responses");
      assert.equal(call!.model, "gpt-5");
      assert.equal(call!.outcome, "ok");
      assert.deepEqual(call!.usage, { input: 100, output: 30, cacheRead: 60, cacheWrite: 0, reasoning: 20 });
      assert.equal(call!.estimated, false);
      assert.equal(call!.costUsd, (100 * PRICE.input + 30 * PRICE.output + 60 * PRICE.cacheRead) / 1e6);
      assert.equal(fx.events.at(-1)?.wire, "openai-responses", "the usage event names the wire format");
    } finally {
      await fx.close();
    }
  });

  void it("streams text and function calls the SDK assembles, metered from response.completed", async () => {
    const fx = await startFixture({
      turns: [
        {
          text: "Let me look that up for you, one moment.",
          toolCalls: [weather, { id: "call_fixed", name: "lookup", input: { q: "x" } }],
          usage: { input: 40, output: 25, cacheRead: 8 },
        },
      ],
    });
    try {
      const e = await fx.session();
      const stream = openai(e).responses.stream({ model: "gpt-5", input: [{ role: "user", content: "weather?" }] });
      const types: string[] = [];
      stream.on("event", (event) => types.push(event.type));
      const response = await stream.finalResponse();
      assert.equal(types[0], "response.created");
      assert.equal(types.at(-1), "response.completed");
      assert.ok(
        types.includes("response.output_text.delta") && types.includes("response.function_call_arguments.delta"),
      );
      assert.equal(response.output_text, "Let me look that up for you, one moment.");
      const calls = response.output.filter((item) => item.type === "function_call");
      assert.deepEqual(
        calls.map((c) => (c.type === "function_call" ? [c.name, JSON.parse(c.arguments)] : [])),
        [
          ["get_weather", weather.input],
          ["lookup", { q: "x" }],
        ],
      );
      assert.equal(calls[1]?.type === "function_call" ? calls[1].call_id : "", "call_fixed");
      assert.equal(response.usage?.output_tokens, 25);
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.stream, true);
      assert.equal(call!.outcome, "ok");
      assert.deepEqual(call!.usage, { input: 40, output: 25, cacheRead: 8, cacheWrite: 0, reasoning: 0 });
      assert.equal(call!.estimated, false);
    } finally {
      await fx.close();
    }
  });

  void it("records an estimate for a stream cut mid-way, and never replays it", async () => {
    const text = "A Responses answer long enough to be cut in the middle of its text deltas for this test.";
    const fx = await startFixture({ turns: [{ text, cutMidStream: true }, { text: "a replay would get this" }] });
    try {
      const e = await fx.session();
      let received = "";
      await assert.rejects(async () => {
        const stream = await openai(e).responses.create({ model: "gpt-5", input: "x", stream: true });
        for await (const event of stream) if (event.type === "response.output_text.delta") received += event.delta;
      });
      assert.ok(received.length > 0 && received.length < text.length, "the client got part of the answer");
      assert.equal(fx.model.requests.length, 1, "no replay after bytes reached the client");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "stream_cut");
      assert.equal(call!.estimated, true);
      assert.ok(call!.usage.input > 0);
      assert.ok(call!.usage.output >= Math.ceil(received.length / 4), "output estimated from what was streamed");
    } finally {
      await fx.close();
    }
  });

  void it("retries a stream that dies before its first byte reached the client, and meters both attempts", async () => {
    const fx = await startFixture({
      turns: [{ fail: { status: 529 } }, { text: "after a retry", usage: { input: 3, output: 2 } }],
    });
    try {
      const e = await fx.session();
      const response = await openai(e).responses.stream({ model: "gpt-5", input: "x" }).finalResponse();
      assert.equal(response.output_text, "after a retry");
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.attempts, 2);
      assert.deepEqual([call!.usage.input, call!.usage.output], [3, 2]);
    } finally {
      await fx.close();
    }
  });

  void it("cuts a stream off where it crosses the budget with Responses' error event, then refuses further calls", async () => {
    const long = "word ".repeat(2000);
    const fx = await startFixture({ turns: [{ text: long, usage: { input: 10, output: 2500 } }, { text: "never" }] });
    try {
      const e = await fx.session({ budgetUsd: 0.003 });
      let received = "";
      let error: { code?: unknown; message?: unknown } | undefined;
      const stream = await openai(e).responses.create({
        model: "gpt-5",
        input: "x",
        max_output_tokens: 4000,
        stream: true,
      });
      for await (const event of stream) {
        if (event.type === "response.output_text.delta") received += event.delta;
        if (event.type === "error") error = event;
        assert.notEqual(event.type, "response.completed");
      }
      assert.equal(error?.code, "budget_exhausted");
      assert.match(String(error?.message), /budget/);
      assert.ok(received.length > 0 && received.length < long.length);
      const [call] = await fx.proxy.store.listCalls(e.job);
      assert.equal(call!.outcome, "budget_cut");
      await assert.rejects(
        openai(e).responses.create({ model: "gpt-5", input: "x", max_output_tokens: 10 }),
        (thrown: unknown) => {
          assert.ok(thrown instanceof OpenAI.APIError);
          assert.equal(thrown.status, 402);
          assert.equal(thrown.type, "budget_exhausted");
          return true;
        },
      );
      assert.equal(fx.model.requests.length, 1);
    } finally {
      await fx.close();
    }
  });

  void it("answers its own errors in OpenAI's shape on the Responses route", async () => {
    const fx = await startFixture({ turns: [] });
    try {
      const e = await fx.session();
      await assert.rejects(
        new OpenAI({
          baseURL: e.openaiBaseUrl,
          apiKey: "not-a-token",
          defaultHeaders: e.headers,
          maxRetries: 0,
        }).responses.create({ model: "gpt-5", input: "x" }),
        (thrown: unknown) =>
          thrown instanceof OpenAI.AuthenticationError && /session token is unknown/.test(thrown.message),
      );
      const unknownProvider = await post(
        `${fx.proxy.url}/nobody/v1/responses`,
        { model: "gpt-5", input: "x" },
        { authorization: `Bearer ${e.token}`, ...e.headers },
      );
      assert.equal(unknownProvider.status, 404);
      assert.deepEqual(Object.keys(JSON.parse(unknownProvider.text).error).sort(), [
        "code",
        "message",
        "param",
        "type",
      ]);
      const wrongPath = await fetch(`${fx.proxy.url}/openai/v1/responses/resp_1/cancel`, {
        method: "POST",
        body: "{}",
      });
      assert.equal(wrongPath.status, 404);
      const body = (await wrongPath.json()) as { error: { message: string } };
      assert.match(body.error.message, /\/\{provider\}\/v1\/responses/);
    } finally {
      await fx.close();
    }
  });
});
