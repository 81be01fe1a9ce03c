// startTelemetry exports over OTLP/HTTP to a real receiver process on
// loopback (tools/test-infra's), configured by OTEL_* alone, and the trace
// and the GenAI metrics are read back from it.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { context, SpanKind, trace } from "@opentelemetry/api";
import { genAiClientMetrics, oz0Tracer, startTelemetry, traceContextOf } from "../src/index.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

void test("spans and metrics reach an OTLP/HTTP receiver process and read back as one trace", async () => {
  const receiver = spawn(process.execPath, [path.join(repoRoot, "tools", "test-infra", "bin", "otlp-receiver.mjs")], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  try {
    let url = "";
    for await (const line of createInterface({ input: receiver.stdout })) {
      url = (JSON.parse(line) as { url: string }).url;
      break;
    }
    assert.ok(url, "the receiver printed its URL");
    // OTEL_SERVICE_NAME from the shell does not rename the service: every service of a stack would share it.
    Object.assign(process.env, {
      OTEL_EXPORTER_OTLP_ENDPOINT: url,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_LOGS_EXPORTER: "none",
      OTEL_SERVICE_NAME: "from-the-shell",
    });
    const telemetry = startTelemetry({ serviceName: "oz0-export-test" });
    assert.equal(telemetry.enabled, true);
    const tracer = oz0Tracer("export-test");
    let traceId = "";
    let traceparent = "";
    tracer.startActiveSpan("invoke_agent exporter", { kind: SpanKind.INTERNAL }, (root) => {
      traceId = root.spanContext().traceId;
      traceparent = traceContextOf(context.active()).traceparent;
      const child = tracer.startSpan("chat model-x", { attributes: { "gen_ai.usage.input_tokens": 12 } });
      child.end();
      root.end();
    });
    genAiClientMetrics().tokenUsage.record(12, { "gen_ai.token.type": "input" });
    assert.match(
      traceparent,
      new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`),
      "the active context propagates as W3C traceparent",
    );
    // Shutdown flushes: everything is at the receiver when it resolves.
    await telemetry.shutdown();
    const spans = (await (await fetch(`${url}/spans`)).json()) as {
      traceId: string;
      spanId: string;
      parentSpanId: string;
      name: string;
      service: string;
      attributes: Record<string, unknown>;
    }[];
    const root = spans.find((s) => s.name === "invoke_agent exporter");
    const chat = spans.find((s) => s.name === "chat model-x");
    assert.ok(root && chat, JSON.stringify(spans));
    assert.equal(root.traceId, traceId);
    assert.equal(root.service, "oz0-export-test");
    assert.equal(chat.traceId, traceId);
    assert.equal(chat.parentSpanId, root.spanId);
    assert.equal(chat.attributes["gen_ai.usage.input_tokens"], 12);
    const metrics = (await (await fetch(`${url}/metrics`)).json()) as { name: string; value: number; count?: number }[];
    assert.ok(
      metrics.some((m) => m.name === "gen_ai.client.token.usage" && m.value === 12 && m.count === 1),
      JSON.stringify(metrics),
    );
    assert.equal(trace.getActiveSpan(), undefined);
  } finally {
    receiver.kill("SIGTERM");
  }
});
