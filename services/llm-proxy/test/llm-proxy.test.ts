import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { TokenUse } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { PRICE, post, startFixture, type ProxyFixture, type SessionEndpoint } from "./proxy-fixture.js";

function anthropicClient(endpoint: SessionEndpoint): Anthropic {
  return new Anthropic({
    baseURL: endpoint.anthropicBaseUrl,
    apiKey: endpoint.token,
    defaultHeaders: endpoint.headers,
    maxRetries: 0,
  });
}

function openAiClient(endpoint: SessionEndpoint): OpenAI {
  return new OpenAI({
    baseURL: endpoint.openaiBaseUrl,
    apiKey: endpoint.token,
    defaultHeaders: endpoint.headers,
    maxRetries: 0,
  });
}

void describe("real clients through the proxy", () => {
  let fx: ProxyFixture;
  let endpoint: SessionEndpoint;
  before(async () => {
    fx = await startFixture({
      turns: [
        { text: "non-streamed anthropic answer", usage: { input: 100, output: 20, cacheRead: 50, cacheWrite: 10 } },
        {
          text: "streamed anthropic answer, long enough for several deltas",
          toolCalls: [{ name: "Read", input: { path: "a.txt" } }],
          usage: { input: 120, output: 30, cacheRead: 5 },
        },
        { text: "non-streamed openai answer", usage: { input: 40, output: 8, cacheRead: 4 } },
        { text: "streamed openai answer without usage asked", usage: { input: 41, output: 9 } },
        { text: "streamed openai answer with usage asked", usage: { input: 42, output: 10 } },
      ],
    });
    endpoint = await fx.session();
  });
  after(() => fx.close());

  void it("passes an Anthropic non-streaming call through with the provider key, and meters it", async () => {
    const message = await anthropicClient(endpoint).messages.create({
      model: "claude-sonnet-5",
      max_tokens: 200,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.deepEqual(message.content, [{ type: "text", text: "non-streamed anthropic answer" }]);
    assert.equal(message.usage.cache_read_input_tokens, 50);
    const upstream = fx.model.requests.at(-1)!;
    assert.equal(
      upstream.headers["x-api-key"],
      "sk-ant-api03-PLANTEDq9Zx7Lw2Vb8Nc4Md6Kf1Hg3Js5Tr0Yu-xYz0123456789AbCdEf",
    );
    assert.equal(upstream.headers["oz0-job"], undefined, "the proxy's own headers stay at the proxy");
    assert.equal(upstream.headers.authorization, undefined, "the session token never goes upstream");
    const [call] = await fx.proxy.store.listCalls(endpoint.job);
    assert.ok(call);
    assert.deepEqual(call.usage, { input: 100, output: 20, cacheRead: 50, cacheWrite: 10, reasoning: 0 });
    assert.equal(call.attempts, 1);
    assert.equal(call.estimated, false);
    const expected = (100 * PRICE.input + 20 * PRICE.output + 50 * PRICE.cacheRead + 10 * PRICE.cacheWrite) / 1e6;
    assert.ok(Math.abs(call.costUsd - expected) < 1e-12);
  });

  void it("streams an Anthropic answer with a tool call and meters message_start merged with message_delta", async () => {
    const stream = anthropicClient(endpoint).messages.stream({
      model: "claude-sonnet-5",
      max_tokens: 200,
      messages: [{ role: "user", content: "read" }],
      tools: [{ name: "Read", input_schema: { type: "object" } }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, "tool_use");
    assert.deepEqual(final.content.find((b) => b.type === "tool_use")?.input, { path: "a.txt" });
    const call = (await fx.proxy.store.listCalls(endpoint.job)).at(-1)!;
    assert.equal(call.stream, true);
    assert.deepEqual(call.usage, { input: 120, output: 30, cacheRead: 5, cacheWrite: 0, reasoning: 0 });
    assert.equal(call.estimated, false);
    assert.equal(call.outcome, "ok");
    assert.ok(call.ttftMs !== undefined);
  });

  void it("passes an OpenAI non-streaming call through with a bearer key", async () => {
    const completion = await openAiClient(endpoint).chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(completion.choices[0]?.message.content, "non-streamed openai answer");
    assert.equal(
      fx.model.requests.at(-1)!.headers.authorization,
      "Bearer sk-ant-api03-PLANTEDq9Zx7Lw2Vb8Nc4Md6Kf1Hg3Js5Tr0Yu-xYz0123456789AbCdEf",
    );
    const call = (await fx.proxy.store.listCalls(endpoint.job)).at(-1)!;
    assert.deepEqual(call.usage, { input: 40, output: 8, cacheRead: 4, cacheWrite: 0, reasoning: 0 });
  });

  void it("meters an OpenAI stream exactly and hides the usage chunk from a client that did not ask", async () => {
    const stream = await openAiClient(endpoint).chat.completions.create({
      model: "gpt-4o",
      stream: true,
      messages: [{ role: "user", content: "hi" }],
    });
    let text = "";
    let sawUsage = false;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage !== undefined) sawUsage = true;
    }
    assert.equal(text, "streamed openai answer without usage asked");
    assert.equal(sawUsage, false, "no usage field or chunk reaches a client that did not ask");
    assert.equal(fx.model.requests.at(-1)!.body.stream_options.include_usage, true, "the proxy asked upstream");
    const call = (await fx.proxy.store.listCalls(endpoint.job)).at(-1)!;
    assert.deepEqual(call.usage, { input: 41, output: 9, cacheRead: 0, cacheWrite: 0, reasoning: 0 });
    assert.equal(call.estimated, false);
  });

  void it("passes the usage chunk to a client that asked for it", async () => {
    const stream = await openAiClient(endpoint).chat.completions.create({
      model: "gpt-4o",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "hi" }],
    });
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    assert.equal(usage?.prompt_tokens, 42);
    assert.equal(usage?.completion_tokens, 10);
  });

  void it("rolls usage up per job and agent in GetUsage, and emitted a usage event per call", async () => {
    const usage = await fx.control.getUsage({ job: endpoint.job });
    assert.equal(usage.total?.calls, 5n);
    assert.equal(usage.total?.attempts, 5n);
    assert.equal(usage.total?.inputTokens, BigInt(100 + 120 + 40 + 41 + 42));
    assert.equal(usage.agents.length, 1);
    assert.equal(usage.agents[0]?.agent, "coder");
    assert.ok((usage.total?.costUsd ?? 0) > 0);
    assert.equal(usage.total?.nominal, false, "a provider that was called: its prices are real");
    const events = fx.events.filter((e) => e.job === endpoint.job);
    assert.equal(events.length, 5);
  });
});

void describe("who is calling", () => {
  let fx: ProxyFixture;
  let endpoint: SessionEndpoint;
  const body = { model: "claude-sonnet-5", max_tokens: 10, messages: [{ role: "user", content: "x" }] };
  before(async () => {
    fx = await startFixture({ turns: () => ({ text: "ok" }) });
    endpoint = await fx.session();
  });
  after(() => fx.close());

  void it("refuses a call without a token", async () => {
    const r = await post(`${endpoint.anthropicBaseUrl}/v1/messages`, body, endpoint.headers);
    assert.equal(r.status, 401);
    assert.match(JSON.parse(r.text).error.message, /missing session token/);
  });

  void it("refuses a call without Oz0-Job, naming the header", async () => {
    const r = await post(`${endpoint.anthropicBaseUrl}/v1/messages`, body, {
      "x-api-key": endpoint.token,
      "Oz0-Agent": endpoint.agent,
    });
    assert.equal(r.status, 401);
    assert.match(JSON.parse(r.text).error.message, /missing Oz0-Job header/);
  });

  void it("refuses a forged Oz0-Job with 403, naming the header", async () => {
    const r = await post(`${endpoint.anthropicBaseUrl}/v1/messages`, body, {
      "x-api-key": endpoint.token,
      "Oz0-Job": "someone-elses-job",
      "Oz0-Agent": endpoint.agent,
    });
    assert.equal(r.status, 403);
    const error = JSON.parse(r.text).error;
    assert.equal(error.type, "permission_error");
    assert.match(error.message, /Oz0-Job header does not match/);
  });

  void it("refuses a forged Oz0-Agent on the OpenAI route in OpenAI's error shape", async () => {
    const r = await post(`${endpoint.openaiBaseUrl}/chat/completions`, body, {
      authorization: `Bearer ${endpoint.token}`,
      "Oz0-Job": endpoint.job,
      "Oz0-Agent": "intruder",
    });
    assert.equal(r.status, 403);
    assert.match(JSON.parse(r.text).error.message, /Oz0-Agent header does not match/);
  });

  void it("refuses a revoked token, and never reached the provider for any refusal", async () => {
    const ok = await post(`${endpoint.anthropicBaseUrl}/v1/messages`, body, {
      "x-api-key": endpoint.token,
      ...endpoint.headers,
    });
    assert.equal(ok.status, 200);
    const revoked = await fx.control.revokeSessionToken({ session: endpoint.session });
    assert.equal(revoked.revoked, 1);
    assert.equal(revoked.use, TokenUse.USED, "the revocation says a model call carried the token");
    const r = await post(`${endpoint.anthropicBaseUrl}/v1/messages`, body, {
      "x-api-key": endpoint.token,
      ...endpoint.headers,
    });
    assert.equal(r.status, 401);
    assert.match(JSON.parse(r.text).error.message, /unknown or revoked/);
    assert.equal(fx.model.requests.length, 1);
  });

  void it("reports a token no call carried as unused when it is revoked, and refuses it from then on", async () => {
    const unused = await fx.session();
    const revoked = await fx.control.revokeSessionToken({ session: unused.session });
    assert.deepEqual({ revoked: revoked.revoked, use: revoked.use }, { revoked: 1, use: TokenUse.NEVER });
    const r = await post(`${unused.anthropicBaseUrl}/v1/messages`, body, {
      "x-api-key": unused.token,
      ...unused.headers,
    });
    assert.equal(r.status, 401);
    assert.equal(
      (await fx.control.revokeSessionToken({ session: unused.session })).use,
      TokenUse.NEVER,
      "asked again: still never used",
    );
    assert.equal(
      (await fx.control.revokeSessionToken({ session: "ses-never-minted" })).use,
      TokenUse.UNSPECIFIED,
      "no token matched: nothing is known",
    );
  });
});

void it("gives sessions the public URL it is told (OZ0_PUBLIC_URL), not the one it listens on", async () => {
  const fx = await startFixture({ turns: [], config: { host: "0.0.0.0", publicUrl: "http://10.96.0.12:7702/" } });
  try {
    const endpoint = await fx.session();
    assert.equal(endpoint.anthropicBaseUrl, "http://10.96.0.12:7702/anthropic");
    assert.equal(endpoint.openaiBaseUrl, "http://10.96.0.12:7702/openai/v1");
    assert.match(fx.proxy.url, /^http:\/\/0\.0\.0\.0:\d+$/);
  } finally {
    await fx.close();
  }
});
