import { Authenticator } from "../src/auth/authenticator.js";
import assert from "node:assert/strict";
import { test } from "node:test";
import { context, propagation, trace } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "@oz0/proto/grpc/health/v1/health_pb";
import { serve } from "../src/serve.js";
import { telemetryConfigured, traceContextClientInterceptor } from "../src/telemetry.js";

void test("telemetry is off unless the OTEL_* environment configures an exporter", () => {
  assert.equal(telemetryConfigured({}), false);
  assert.equal(telemetryConfigured({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" }), true);
  assert.equal(telemetryConfigured({ OTEL_TRACES_EXPORTER: "none", OTEL_EXPORTER_OTLP_ENDPOINT: "http://x" }), false);
  assert.equal(telemetryConfigured({ OTEL_SDK_DISABLED: "true", OTEL_TRACES_EXPORTER: "otlp" }), false);
});

void test("an RPC continues the caller's trace: the server span is a child of the client span", async () => {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(provider);
  const server = await serve({ name: "test", port: 0, services: [], auth: new Authenticator({}) });
  try {
    const client = createClient(
      Health,
      createGrpcTransport({ baseUrl: server.url, interceptors: [traceContextClientInterceptor] }),
    );
    const tracer = trace.getTracer("test");
    await tracer.startActiveSpan("caller", async (span) => {
      await client.check({ service: "liveness" });
      span.end();
    });
    const spans = exporter.getFinishedSpans();
    const caller = spans.find((s) => s.name === "caller");
    const rpc = spans.find((s) => s.name === "grpc.health.v1.Health/Check");
    assert.ok(caller && rpc, `spans: ${spans.map((s) => s.name).join(", ")}`);
    assert.equal(rpc.spanContext().traceId, caller.spanContext().traceId);
    assert.equal(rpc.parentSpanContext?.spanId, caller.spanContext().spanId);
    assert.equal(rpc.attributes["rpc.method"], "Check");

    // A failed RPC is an error span whose status message names the code, never the error's own text.
    await tracer.startActiveSpan("caller", async (span) => {
      await assert.rejects(client.check({ service: "no-such-service" }));
      span.end();
    });
    const failed = exporter.getFinishedSpans().filter((s) => s.name === "grpc.health.v1.Health/Check")[1];
    assert.equal(failed?.status.code, 2);
    assert.equal(failed?.status.message, "NotFound");
    assert.equal(failed?.attributes["rpc.grpc.status_code"], 5);

    // A probe's health check, with no trace context, leaves no span (a lone one-span trace each).
    const before = exporter.getFinishedSpans().length;
    await client.check({ service: "liveness" });
    await client.check({ service: "readiness" });
    assert.deepEqual(
      exporter
        .getFinishedSpans()
        .slice(before)
        .map((s) => s.name),
      [],
    );
  } finally {
    await server.close({ graceMs: 100 });
    trace.disable();
    propagation.disable();
    context.disable();
  }
});
