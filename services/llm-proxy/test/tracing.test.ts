// The proxy's spans: `chat {model}` continues the caller's traceparent, carries
// the GenAI usage attributes, has one child per attempt upstream, sends its own
// traceparent to the provider, and holds no content.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { CONTENT_ATTRIBUTES, startInMemoryTelemetry, type InMemoryTelemetry } from "@oz0/serving";
import { post, startFixture, type ProxyFixture } from "./proxy-fixture.js";

const MARKER = "PLANTED-CONTENT-MARKER-7f3a";
const TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN = "00f067aa0ba902b7";

void describe("tracing in the proxy", () => {
  let telemetry: InMemoryTelemetry;
  let fx: ProxyFixture;
  before(async () => {
    telemetry = startInMemoryTelemetry({ serviceName: "oz0-llm-proxy" });
    fx = await startFixture({
      turns: [
        { fail: { status: 529, body: { type: "error", error: { type: "overloaded_error", message: "busy" } } } },
        { text: `answer ${MARKER}`, usage: { input: 100, output: 20, cacheRead: 50, cacheWrite: 10 } },
      ],
    });
  });
  after(async () => {
    await fx.close();
    await telemetry.shutdown();
  });

  void it("continues the caller's trace with chat {model}, usage, provider and one span per attempt", async () => {
    const endpoint = await fx.session({ session: "session-traced" });
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
});
