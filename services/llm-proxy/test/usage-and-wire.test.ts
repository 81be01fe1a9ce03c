import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { EventsService, PublishResponseSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator, registration, serve } from "@oz0/serving";
import Anthropic from "@anthropic-ai/sdk";
import pino from "pino";
import { BudgetLedger } from "../src/budget-ledger.js";
import { defaultProviders, priceOf, validateProviders } from "../src/provider-config.js";
import { DEFAULT_RETRY_POLICY, retryDelayMs } from "../src/retry-policy.js";
import { eventsUsageSink, USAGE_EVENT_TYPE } from "../src/usage-sink.js";
import { AnthropicStreamMeter } from "../src/wire-formats/anthropic-messages.js";
import { OpenAiStreamMeter } from "../src/wire-formats/openai-chat-completions.js";
import { PLANTED_KEY, startFixture } from "./proxy-fixture.js";
import { testCredentials } from "@oz0/serving/testing";

const sse = (type: string, data: unknown): string => `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;

void describe("stream meters", () => {
  void it("merges Anthropic message_delta usage into message_start usage field by field", () => {
    const meter = new AnthropicStreamMeter();
    meter.onEvent(
      sse("message_start", {
        type: "message_start",
        message: {
          usage: { input_tokens: 100, cache_read_input_tokens: 40, cache_creation_input_tokens: 7, output_tokens: 1 },
        },
      }),
    );
    // Newer API versions repeat some fields in message_delta; null or absent ones keep the start's value.
    meter.onEvent(
      sse("message_delta", {
        type: "message_delta",
        delta: { stop_reason: "end_turn" },
        usage: { output_tokens: 250, cache_read_input_tokens: null },
      }),
    );
    meter.onEvent(sse("message_stop", { type: "message_stop" }));
    assert.deepEqual(meter.reading(0), {
      usage: { input: 100, output: 250, cacheRead: 40, cacheWrite: 7, reasoning: 0 },
      estimated: false,
    });
    assert.equal(meter.complete, true);
    assert.equal(meter.finishReason, "end_turn");
  });

  void it("normalises OpenAI usage: cached tokens out of prompt_tokens, reasoning kept as a part of output", () => {
    const meter = new OpenAiStreamMeter({ clientWantsUsage: false });
    const usageChunk = `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 100, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 60 }, completion_tokens_details: { reasoning_tokens: 20 } } })}\n\n`;
    assert.equal(meter.onEvent(usageChunk), undefined, "dropped for a client that did not ask");
    assert.equal(
      meter.onEvent(`data: ${JSON.stringify({ choices: [{ delta: { content: "x" } }], usage: null })}\n\n`),
      `data: {"choices":[{"delta":{"content":"x"}}]}\n\n`,
    );
    assert.deepEqual(meter.reading(0).usage, { input: 40, output: 30, cacheRead: 60, cacheWrite: 0, reasoning: 20 });
    assert.equal(meter.finishReason, undefined);
    meter.onEvent(`data: ${JSON.stringify({ choices: [{ index: 0, delta: {}, finish_reason: "length" }] })}\n\n`);
    assert.equal(meter.finishReason, "length");
  });
});

void describe("retry policy", () => {
  void it("honours retry-after-ms, retry-after seconds and dates, capped", () => {
    const policy = { ...DEFAULT_RETRY_POLICY, maxRetryAfterMs: 5_000 };
    assert.equal(retryDelayMs({ policy, nextAttempt: 2, headers: { "retry-after-ms": "250" } }), 250);
    assert.equal(retryDelayMs({ policy, nextAttempt: 2, headers: { "retry-after": "2" } }), 2_000);
    assert.equal(retryDelayMs({ policy, nextAttempt: 2, headers: { "retry-after": "3600" } }), 5_000);
    assert.equal(
      retryDelayMs({
        policy,
        nextAttempt: 2,
        headers: { "retry-after": new Date(10_000).toUTCString() },
        now: () => 9_000,
      }),
      1_000,
    );
  });

  void it("backs off exponentially with full jitter when the provider says nothing", () => {
    const policy = DEFAULT_RETRY_POLICY;
    assert.equal(retryDelayMs({ policy, nextAttempt: 2, random: () => 1 }), 500);
    assert.equal(retryDelayMs({ policy, nextAttempt: 4, random: () => 1 }), 2_000);
    assert.equal(retryDelayMs({ policy, nextAttempt: 9, random: () => 1 }), 8_000);
    assert.equal(retryDelayMs({ policy, nextAttempt: 4, random: () => 0.5 }), 1_000);
  });
});

void describe("budget ledger", () => {
  void it("holds reservations until settled, so the next call sees what is left", async () => {
    const ledger = new BudgetLedger({ spentBefore: () => 0.25 });
    const base = { session: "s", limitUsd: 1, minimumUsd: 0.01 };
    const first = await ledger.reserve({ ...base, worstCaseUsd: 0.5, partial: false });
    await assert.rejects(ledger.reserve({ ...base, worstCaseUsd: 0.5, partial: false }), /only \$0\.2500/);
    const partial = await ledger.reserve({ ...base, worstCaseUsd: 0.5, partial: true });
    assert.equal(partial.amountUsd, 0.25);
    await first.settle(0.1);
    await partial.settle(0.25);
    await partial.settle(0.25);
    assert.deepEqual(
      ledger.snapshot("s"),
      { limitUsd: 1, spentUsd: 0.6, reservedUsd: 0 },
      "a second settle changes nothing",
    );
  });

  void it("opens one account when first calls arrive together while the starting point is read", async () => {
    let reads = 0;
    const ledger = new BudgetLedger({
      spentBefore: async () => {
        reads += 1;
        await new Promise((resolve) => setTimeout(resolve, 5));
        return 0.5;
      },
    });
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, () =>
        ledger.reserve({ session: "s", limitUsd: 1, worstCaseUsd: 0.2, minimumUsd: 0.01, partial: false }),
      ),
    );
    assert.equal(reads, 1);
    assert.equal(results.filter((r) => r.status === "fulfilled").length, 2, "0.5 left holds two calls of 0.2");
    assert.deepEqual(ledger.snapshot("s"), { limitUsd: 1, spentUsd: 0.5, reservedUsd: 0.4 });
  });
});

void describe("prices", () => {
  void it("matches the exact model, else the longest key followed by a version or date, or a family-*, else *", () => {
    const provider = {
      name: "p",
      prices: {
        "claude-sonnet-4": { input: 3, output: 15 },
        "claude-sonnet-4-5": { input: 4, output: 16 },
        "gpt-5": { input: 1.25, output: 10 },
        "mistral-*": { input: 2, output: 6 },
        "*": { input: 1, output: 1 },
      },
    };
    assert.equal(priceOf(provider, "claude-sonnet-4-5-20250929")?.input, 4);
    assert.equal(priceOf(provider, "claude-sonnet-4-0")?.input, 3);
    assert.equal(priceOf(provider, "gpt-5-2025-08-07")?.input, 1.25);
    assert.equal(priceOf(provider, "claude-sonnet-4-latest")?.input, 3);
    assert.equal(priceOf(provider, "mistral-large-2411")?.input, 2);
    assert.equal(priceOf(provider, "other")?.input, 1);
    // A dearer sibling is not its family's price: without "*" it has none, and a budgeted call to it is refused.
    assert.equal(priceOf(provider, "gpt-5-pro")?.input, 1);
    const noDefault = Object.fromEntries(Object.entries(provider.prices).filter(([key]) => key !== "*"));
    for (const model of ["gpt-5-pro", "gpt-5-pro-2025-10-06", "claude-sonnet-4x", "gpt-5.5"])
      assert.equal(priceOf({ name: "p", prices: noDefault }, model), undefined, model);
  });

  void it("prices the shipped table's dearer siblings at their own price", () => {
    const openai = defaultProviders().find((p) => p.name === "openai")!;
    assert.equal(priceOf(openai, "gpt-5-pro")?.output, 120);
    assert.equal(priceOf(openai, "gpt-5-mini-2025-08-07")?.input, 0.25);
    assert.equal(priceOf(openai, "gpt-5-codex"), undefined, "an unknown sibling has no price, not gpt-5's");
  });

  void it("reads only the table's own entries, and refuses a price that is not a number of dollars", () => {
    const prefixes = { name: "p", prices: { "claude-": { input: 3, output: 15 } } };
    for (const model of ["constructor", "__proto__", "toString", "valueOf", "hasOwnProperty"])
      assert.equal(priceOf(prefixes, model), undefined, model);
    const bad = (price: object) => () =>
      validateProviders([{ name: "p", baseUrl: "http://127.0.0.1:1", prices: { m: price as never } }]);
    assert.throws(bad({ input: 1, output: 1, cacheRead: "0.3" }), /cacheRead must be dollars per million tokens/);
    assert.throws(bad({ input: 1, output: Number.POSITIVE_INFINITY }), /needs input and output dollars/);
    assert.doesNotThrow(bad({ input: 1, output: 2, cacheRead: 0.1 }));
    for (const maxOutput of [0, 1.5, "64000", -1])
      assert.throws(
        bad({ input: 1, output: 1, maxOutput }),
        /maxOutput must be the most output tokens/,
        String(maxOutput),
      );
    assert.doesNotThrow(bad({ input: 1, output: 2, maxOutput: 64_000 }));
  });

  void it("gives every model of the shipped table the most output it writes, which a call naming no limit holds", () => {
    for (const provider of defaultProviders().filter((p) => p.kind !== "scripted"))
      for (const [model, price] of Object.entries(provider.prices ?? {}))
        assert.ok(Number.isSafeInteger(price.maxOutput), `${provider.name}/${model} has no maxOutput`);
    assert.equal(
      priceOf(
        defaultProviders().find((p) => p.name === "openai")!,
        "gpt-5-2025-08-07",
      )?.maxOutput,
      128_000,
    );
  });
});

void describe("usage events and count_tokens", () => {
  void it("publishes one usage event per call to the events service, counts and ids only", async () => {
    const received: RawEvent[] = [];
    const events = await serve({
      name: "events-stub",
      port: 0,
      auth: new Authenticator(testCredentials.settingsFor("events")),
      logger: pino({ level: "silent" }),
      services: [
        registration(EventsService, {
          publish(request) {
            received.push(...request.events);
            return create(PublishResponseSchema, { accepted: request.events.length });
          },
        }),
      ],
    });
    const logger = pino({ level: "silent" });
    const fx = await startFixture({
      turns: [{ text: `secret prompt answer ${PLANTED_KEY}`, usage: { input: 5, output: 6, cacheRead: 1 } }],
      config: { usageSink: eventsUsageSink({ url: events.url, logger, token: testCredentials.services["llm-proxy"] }) },
    });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      await client.messages.create({
        model: "claude-sonnet-5",
        max_tokens: 10,
        messages: [{ role: "user", content: "a private prompt" }],
      });
    } finally {
      await fx.close();
      await events.close({ graceMs: 100 });
    }
    assert.equal(received.length, 1);
    const [event] = received;
    assert.equal(event!.type, USAGE_EVENT_TYPE);
    assert.equal(event!.source, "llm-proxy");
    assert.equal(event!.agentName, "coder");
    assert.equal(event!.tokens?.inputTokens, 5);
    assert.equal(event!.tokens?.cacheReadTokens, 1);
    const text = JSON.stringify(event, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v));
    assert.doesNotMatch(text, /private prompt|secret prompt|PLANTED/);
  });

  void it("passes count_tokens through with the provider key, without metering it", async () => {
    const fx = await startFixture({ turns: [] });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      const counted = await client.messages.countTokens({
        model: "claude-sonnet-5",
        messages: [{ role: "user", content: "count these words please" }],
      });
      assert.ok(counted.input_tokens > 0);
      assert.equal(fx.model.requests[0]?.wire, "anthropic-count-tokens");
      assert.equal(fx.model.requests[0]?.headers["x-api-key"], PLANTED_KEY);
      assert.equal((await fx.proxy.store.listCalls(e.job)).length, 0);
    } finally {
      await fx.close();
    }
  });

  void it("accepts provider/model names and sends the provider the bare model name", async () => {
    const fx = await startFixture({ turns: [{ text: "ok" }] });
    try {
      const e = await fx.session();
      const client = new Anthropic({
        baseURL: e.anthropicBaseUrl,
        apiKey: e.token,
        defaultHeaders: e.headers,
        maxRetries: 0,
      });
      await client.messages.create({
        model: "anthropic/claude-sonnet-5",
        max_tokens: 10,
        messages: [{ role: "user", content: "x" }],
      });
      assert.equal(fx.model.requests[0]?.body.model, "claude-sonnet-5");
      assert.equal((await fx.proxy.store.listCalls(e.job))[0]?.model, "claude-sonnet-5");
    } finally {
      await fx.close();
    }
  });

  void it("replays a scripted provider's script per session when asked, and gives code scripts the session", async () => {
    const { startLlmProxy } = await import("../src/index.js");
    const { LlmProxyService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
    const { createClient } = await import("@connectrpc/connect");
    const { createGrpcTransport } = await import("@connectrpc/connect-node");
    const proxy = await startLlmProxy({
      auth: testCredentials.settingsFor("llm-proxy"),
      providers: [
        { name: "scripted", kind: "scripted", scriptPerSession: true, script: [{ text: "first" }, { text: "second" }] },
        { name: "by-session", kind: "scripted", script: (_request, session) => ({ text: `hello ${session}` }) },
      ],
      logger: pino({ level: "silent" }),
    });
    try {
      const control = createClient(
        LlmProxyService,
        createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }),
      );
      const ask = async (session: string, provider = "scripted"): Promise<{ status: number; text: string }> => {
        const minted = await control.mintSessionToken({ job: `job-${session}`, agent: "a", session });
        const r = await fetch(`${proxy.url}/${provider}/v1/messages`, {
          method: "POST",
          headers: { "x-api-key": minted.token, ...minted.headers, "content-type": "application/json" },
          body: JSON.stringify({
            model: "m",
            max_tokens: 100,
            tools: [{ name: "t", input_schema: {} }],
            messages: [{ role: "user", content: "x" }],
          }),
        });
        const body = (await r.json()) as { content?: { text: string }[]; error?: { message: string } };
        return { status: r.status, text: body.content?.[0]?.text ?? body.error?.message ?? "" };
      };
      assert.equal((await ask("s1")).text, "first");
      assert.equal((await ask("s2")).text, "first");
      assert.equal((await ask("s1")).text, "second");
      const over = await ask("s1");
      assert.equal(over.status, 400);
      assert.match(over.text, /session s1 used all 2 turns/);
      assert.equal((await ask("s9", "by-session")).text, "hello s9");
      // Nobody was charged for the scripted provider's answers: its costs are nominal.
      const usage = await control.getUsage({ job: "job-s1" });
      assert.equal(usage.total?.calls, 3n);
      assert.equal(usage.total?.nominal, true);
      assert.equal(usage.agents[0]?.usage?.nominal, true);
    } finally {
      await proxy.close({ graceMs: 50 });
    }
  });

  void it("answers a per-session script from the conversation, so a proxy started again (counters gone) answers a retried call with the turn it was on", async () => {
    const { startLlmProxy } = await import("../src/index.js");
    const { LlmProxyService } = await import("@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb");
    const { createClient } = await import("@connectrpc/connect");
    const { createGrpcTransport } = await import("@connectrpc/connect-node");
    const script = [{ text: "first" }, { text: "second" }, { text: "third" }];
    // A fresh proxy: what a restart leaves, with no memory of the session's earlier calls.
    const proxy = await startLlmProxy({
      auth: testCredentials.settingsFor("llm-proxy"),
      providers: [{ name: "scripted", kind: "scripted", scriptPerSession: true, script }],
      logger: pino({ level: "silent" }),
    });
    try {
      const control = createClient(
        LlmProxyService,
        createGrpcTransport({ baseUrl: proxy.url, interceptors: [testCredentials.caller] }),
      );
      const minted = await control.mintSessionToken({ job: "job-r", agent: "a", session: "r" });
      const conversation = [
        { role: "user", content: "x" },
        { role: "assistant", content: "first" },
        { role: "user", content: "go on" },
        { role: "assistant", content: "second" },
        { role: "user", content: "and?" },
      ];
      const r = await fetch(`${proxy.url}/scripted/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": minted.token, ...minted.headers, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", max_tokens: 100, messages: conversation }),
      });
      const body = (await r.json()) as { content?: { text: string }[] };
      assert.equal(body.content?.[0]?.text, "third", "two answers in the conversation: the third turn");
    } finally {
      await proxy.close({ graceMs: 50 });
    }
  });

  void it("answers unknown routes and providers with 404 and what to call instead", async () => {
    const fx = await startFixture({ turns: [] });
    try {
      const e = await fx.session();
      const wrongPath = await fetch(`${fx.proxy.url}/anthropic/v1/complete`, { method: "POST", body: "{}" });
      assert.equal(wrongPath.status, 404);
      assert.match(await wrongPath.text(), /\/\{provider\}\/v1\/messages/);
      const wrongProvider = await fetch(`${fx.proxy.url}/nobody/v1/messages`, {
        method: "POST",
        headers: { "x-api-key": e.token, ...e.headers },
        body: "{}",
      });
      assert.equal(wrongProvider.status, 404);
      assert.match(await wrongProvider.text(), /no provider named nobody/);
    } finally {
      await fx.close();
    }
  });
});
