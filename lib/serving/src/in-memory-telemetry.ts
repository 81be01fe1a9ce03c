// OpenTelemetry with the spans kept in memory, for tests that assert what a
// component traces in-process (the end-to-end tests use a real OTLP receiver).
import { NodeSDK } from "@opentelemetry/sdk-node";
import { InMemorySpanExporter, SimpleSpanProcessor, type ReadableSpan } from "@opentelemetry/sdk-trace-base";

export interface InMemoryTelemetry {
  /** Every span ended so far. */
  spans(): ReadableSpan[];
  reset(): void;
  shutdown(): Promise<void>;
}

/** Registers the global tracer provider, context manager and W3C propagator, exporting to memory. */
export function startInMemoryTelemetry(options: { serviceName?: string } = {}): InMemoryTelemetry {
  const exporter = new InMemorySpanExporter();
  const sdk = new NodeSDK({
    serviceName: options.serviceName ?? "oz0-test",
    spanProcessors: [new SimpleSpanProcessor(exporter)],
    // Empty lists, not undefined: NodeSDK would otherwise read OTEL_METRICS_EXPORTER and export to localhost.
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
    // No detectors: their attributes arrive asynchronously, and spans wait for them before export;
    // without them a span is in memory as soon as it ends.
    resourceDetectors: [],
  });
  sdk.start();
  return {
    spans: () => exporter.getFinishedSpans(),
    reset: () => exporter.reset(),
    shutdown: () => sdk.shutdown(),
  };
}
