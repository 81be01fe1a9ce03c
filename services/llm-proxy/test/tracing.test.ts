// The proxy's spans: `chat {model}` goes in the trace its session token was
// minted in (below the caller's span when the caller names one of that trace,
// and only then), carries the GenAI usage attributes, has one child per
// attempt upstream, sends its own traceparent to the provider, and holds no
// content.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CONTENT_ATTRIBUTES, startInMemoryTelemetry, type InMemoryTelemetry } from "@oz0/serving";
import { post, startFixture, type ProxyFixture } from "./proxy-fixture.js";

const MARKER = "PLANTED-CONTENT-MARKER-7f3a";
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";
/** The orchestrator's span of the session, which mints its token. */
const SESSION_SPAN = "a3ce929d0e0e4736";
const SESSION_TRACE = `00-${TRACE_ID}-${SESSION_SPAN}-01`;

void describe("tracing in the proxy", () => {
  let telemetry: InMemoryTelemetry;
  let fx: ProxyFixture;
  /** A proxy whose model answers every call. */
  let answering: ProxyFixture;
  before(async () => {
    telemetry = startInMemoryTelemetry({ serviceName: "oz0-llm-proxy" });
    answering = await startFixture({ turns: () => ({ text: "ok" }) });
    fx = await startFixture({
      turns: [
        { fail: { status: 529, body: { type: "error", error: { type: "overloaded_error", message: "busy" } } } },
        { text: `answer ${MARKER}`, usage: { input: 100, output: 20, cacheRead: 50, cacheWrite: 10 } },
      ],
    });
  });
  after(async () => {
    await fx.close();
    await answering.close();
    await telemetry.shutdown();
  });

  void it("continues the caller's trace with chat {model}, usage, provider and one span per attempt", async () => {
    const endpoint = await fx.session({ session: "session-traced", traceparent: SESSION_TRACE });
    const response = await post(
      `${endpoint.anthropicBaseUrl}/v1/messages`,
      {
        model: "claude-sonnet-5",
        max_tokens: 50,
        system: `system ${MARKER}`,
        messages: [{ role: "user", content: `question ${MARKER}` }],
      },
      { ...endpoint.headers, "x-api-key": endpoint.token, traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01` },
    );
    assert.equal(response.status, 200);
    const spans = telemetry.spans();
    const chat = spans.find((s) => s.name === "chat claude-sonnet-5");
    assert.ok(chat, `spans: ${spans.map((s) => s.name).join(", ")}`);
    assert.equal(chat.spanContext().traceId, TRACE_ID);
    assert.equal(chat.parentSpanContext?.spanId, CALLER_SPAN);
    assert.equal(chat.attributes["gen_ai.operation.name"], "chat");
    assert.equal(chat.attributes["gen_ai.provider.name"], "anthropic");
    assert.equal(chat.attributes["gen_ai.request.model"], "claude-sonnet-5");
    assert.equal(chat.attributes["gen_ai.usage.input_tokens"], 100);
    assert.equal(chat.attributes["gen_ai.usage.output_tokens"], 20);
    assert.equal(chat.attributes["gen_ai.usage.cache_read.input_tokens"], 50);
    assert.equal(chat.attributes["gen_ai.usage.cache_creation.input_tokens"], 10);
    assert.equal(chat.attributes["gen_ai.conversation.id"], "session-traced");
    assert.equal(chat.attributes["oz0.llm.attempts"], 2);
    assert.equal(chat.attributes["oz0.llm.foreign_traceparent"], undefined);
    assert.deepEqual(
      chat.attributes["gen_ai.response.finish_reasons"],
      ["end_turn"],
      "the stop reason the answer gave",
    );

    const attempts = spans.filter((s) => s.parentSpanContext?.spanId === chat.spanContext().spanId);
    assert.deepEqual(attempts.map((s) => s.attributes["oz0.llm.attempt"]).sort(), [1, 2]);
    assert.deepEqual(attempts.map((s) => s.attributes["http.response.status_code"]).sort(), [200, 529]);

    // The provider sees the proxy's span as its caller.
    const upstream = fx.model.requests.at(-1)!;
    assert.match(upstream.headers.traceparent ?? "", new RegExp(`^00-${TRACE_ID}-${chat.spanContext().spanId}-01$`));

    for (const span of spans) {
      for (const key of CONTENT_ATTRIBUTES) assert.equal(span.attributes[key], undefined, `${span.name} has ${key}`);
      assert.ok(
        !JSON.stringify(span.attributes).includes(MARKER),
        `${span.name} carries content: ${JSON.stringify(span.attributes)}`,
      );
    }
  });

  // A harness names whatever trace it likes: its calls' spans (and the usage events sent from inside them) stay in
  // the trace of its session, not another job's, and are not hidden from its own.
  void it("keeps a call in its session's trace when the harness names another trace, or none", async () => {
    const endpoint = await answering.session({ traceparent: SESSION_TRACE });
    const call = (traceparent?: string) =>
      post(
        `${endpoint.anthropicBaseUrl}/v1/messages`,
        { model: "claude-sonnet-5", max_tokens: 50, messages: [{ role: "user", content: "hi" }] },
        {
          ...endpoint.headers,
          "x-api-key": endpoint.token,
          ...(traceparent !== undefined ? { traceparent } : {}),
        },
      );
    const OTHER_TRACE = "0af7651916cd43dd8448eb211c80319c";
    for (const [named, foreign] of [
      [`00-${OTHER_TRACE}-b7ad6b7169203331-01`, true],
      ["00-not-a-trace", true],
      [undefined, undefined],
    ] as const) {
      const before = telemetry.spans().length;
      const response = await call(named);
      assert.equal(response.status, 200, response.text);
      const chat = telemetry
        .spans()
        .slice(before)
        .find((s) => s.name === "chat claude-sonnet-5");
      assert.ok(chat, `a chat span for ${named}`);
      assert.equal(chat.spanContext().traceId, TRACE_ID, `named ${named}`);
      assert.equal(chat.parentSpanContext?.spanId, SESSION_SPAN, `named ${named}`);
      assert.equal(chat.attributes["oz0.llm.foreign_traceparent"], foreign, `named ${named}`);
      // The provider sees the session's trace too.
      assert.match(answering.model.requests.at(-1)!.headers.traceparent ?? "", new RegExp(`^00-${TRACE_ID}-`));
    }
  });

  // The harness's span is taken as the parent, but not its sampling decision: flags 00 hid the call from the trace.
  void it("records a call whose harness names a span of its session's trace as not sampled", async () => {
    const endpoint = await answering.session({ traceparent: SESSION_TRACE });
    const before = telemetry.spans().length;
    const response = await post(
      `${endpoint.anthropicBaseUrl}/v1/messages`,
      { model: "claude-sonnet-5", max_tokens: 50, messages: [{ role: "user", content: "hi" }] },
      {
        ...endpoint.headers,
        "x-api-key": endpoint.token,
        traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-00`,
        tracestate: "harness=planted",
      },
    );
    assert.equal(response.status, 200, response.text);
    const chat = telemetry
      .spans()
      .slice(before)
      .find((s) => s.name === "chat claude-sonnet-5");
    assert.ok(chat, "the chat span is recorded");
    assert.equal(chat.spanContext().traceId, TRACE_ID);
    assert.equal(chat.parentSpanContext?.spanId, CALLER_SPAN);
    assert.equal(chat.attributes["oz0.llm.foreign_traceparent"], undefined);
    const upstream = answering.model.requests.at(-1)!.headers;
    assert.match(upstream.traceparent ?? "", new RegExp(`^00-${TRACE_ID}-[0-9a-f]{16}-01$`));
    assert.equal(upstream.tracestate, undefined);
  });

  void it("starts a trace of its own for a call whose token was minted in none, whatever the harness names", async () => {
    const endpoint = await answering.session();
    const before = telemetry.spans().length;
    const response = await post(
      `${endpoint.anthropicBaseUrl}/v1/messages`,
      { model: "claude-sonnet-5", max_tokens: 50, messages: [{ role: "user", content: "hi" }] },
      { ...endpoint.headers, "x-api-key": endpoint.token, traceparent: `00-${TRACE_ID}-${CALLER_SPAN}-01` },
    );
    assert.equal(response.status, 200, response.text);
    const chat = telemetry
      .spans()
      .slice(before)
      .find((s) => s.name === "chat claude-sonnet-5");
    assert.ok(chat);
    assert.notEqual(chat.spanContext().traceId, TRACE_ID);
    assert.equal(chat.parentSpanContext, undefined);
    assert.equal(chat.attributes["oz0.llm.foreign_traceparent"], true);
  });

  // The model is the session's word, forwarded as written: a call's span took it whole into its name.
  void it("names a chat span by a model only when it is a model name: no prose, no session token, no megabyte", async () => {
    const endpoint = await answering.session({ traceparent: SESSION_TRACE });
    const before = telemetry.spans().length;
    const models = [`claude-${"z".repeat(256 * 1024)}`, `claude says ${MARKER}`, `claude-oz0st_${"a".repeat(40)}`];
    for (const model of models) {
      const response = await post(
        `${endpoint.anthropicBaseUrl}/v1/messages`,
        { model, max_tokens: 50, messages: [{ role: "user", content: "hi" }] },
        { ...endpoint.headers, "x-api-key": endpoint.token },
      );
      assert.equal(response.status, 200, response.text);
    }
    const spans = telemetry.spans().slice(before);
    assert.equal(
      spans.filter((s) => s.name === "chat").length,
      models.length,
      spans.map((s) => s.name.slice(0, 40)).join(),
    );
    for (const span of spans) {
      const text = `${span.name} ${JSON.stringify(span.attributes)}`;
      assert.ok(text.length < 4096, `${span.name.slice(0, 40)}… is ${text.length} characters`);
      assert.ok(!text.includes(MARKER), `${span.name} carries content: ${text}`);
      assert.ok(!/oz0st_/i.test(text), `${span.name} carries a session token: ${text}`);
    }
  });

  void it("puts the answer's id and model, its finish reason and server.address on the chat span, streamed or not; an error span says its outcome", async (t) => {
    const fx = await startFixture({
      turns: [
        { text: "one" },
        { text: "two" },
        { text: "three" },
        {
          fail: {
            status: 400,
            body: { type: "error", error: { type: "invalid_request_error", message: MARKER } },
          },
        },
      ],
    });
    t.after(() => fx.close());
    const endpoint = await fx.session({ session: "session-answers" });
    const anthropic = { ...endpoint.headers, "x-api-key": endpoint.token };
    const openai = { ...endpoint.headers, authorization: `Bearer ${endpoint.token}` };
    const messages = [{ role: "user", content: `question ${MARKER}` }];
    const calls = [
      [
        `${endpoint.anthropicBaseUrl}/v1/messages`,
        { model: "claude-a", max_tokens: 50, stream: true, messages },
        anthropic,
      ],
      [`${endpoint.openaiBaseUrl}/chat/completions`, { model: "gpt-b", stream: true, messages }, openai],
      [`${endpoint.openaiBaseUrl}/responses`, { model: "gpt-c", stream: true, input: `question ${MARKER}` }, openai],
      [`${endpoint.anthropicBaseUrl}/v1/messages`, { model: "claude-d", max_tokens: 50, messages }, anthropic],
    ] as const;
    for (const [url, body, headers] of calls) await post(url, body, headers);
    const chat = (model: string) => {
      const span = telemetry.spans().find((s) => s.name === `chat ${model}`);
      assert.ok(span, `no chat ${model} span`);
      return span;
    };
    const port = Number(new URL(fx.model.url).port);
    for (const [model, id] of [
      ["claude-a", /^msg_scripted_/],
      ["gpt-b", /^chatcmpl-scripted-/],
      ["gpt-c", /^resp_scripted_/],
    ] as const) {
      const span = chat(model);
      assert.equal(span.attributes["gen_ai.response.model"], model, JSON.stringify(span.attributes));
      assert.match(String(span.attributes["gen_ai.response.id"]), id);
      assert.equal((span.attributes["gen_ai.response.finish_reasons"] as string[] | undefined)?.length, 1);
      assert.equal(span.attributes["server.address"], "127.0.0.1");
      assert.equal(span.attributes["server.port"], port);
    }
    const refused = chat("claude-d");
    assert.equal(refused.status.code, 2);
    assert.equal(
      refused.status.message,
      refused.attributes["error.type"],
      "the outcome's name, never the provider's message",
    );
    assert.ok(refused.status.message, JSON.stringify(refused.attributes));
    for (const span of telemetry.spans()) {
      assert.ok(!JSON.stringify(span.attributes).includes(MARKER), `${span.name} carries content`);
      assert.ok(!String(span.status.message ?? "").includes(MARKER), `${span.name}'s status carries content`);
    }
  });
});
