// Exporting the harness's spans where the runtime says: the sandbox gives a
// session OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (its relay to the job's trace
// collector) when the stack records traces, and OTEL_SDK_DISABLED=true when
// it does not. When it does, the session registers an OpenTelemetry tracer
// provider of its own, so `session.tracer()` spans (and the SDK's own
// permission and runtime-tool spans) reach the job's trace with no set-up by
// the author. The exporter is loaded only then: a harness whose stack records
// no traces pays nothing for it.
import { trace } from "@opentelemetry/api";

/** The session's span export: flush it before the process exits. */
export interface SpanExport {
  /** Sends what is buffered; resolves when done or after `timeoutMs`, never rejects. */
  flush(timeoutMs?: number): Promise<void>;
}

/** How long a flush waits for the collector at most: the runtime allows a harness its grace after the result. */
const DEFAULT_FLUSH_TIMEOUT_MS = 2_000;

/**
 * Starts exporting when `env` asks for OTLP traces, unless a tracer provider
 * is registered already (an author who configures OpenTelemetry keeps theirs).
 */
export async function startSpanExport(options: {
  env: NodeJS.ProcessEnv;
  serviceName: string;
}): Promise<SpanExport | undefined> {
  const { env } = options;
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  if (
    env.OTEL_SDK_DISABLED === "true" ||
    env.OTEL_TRACES_EXPORTER === "none" ||
    endpoint === undefined ||
    endpoint === ""
  )
    return undefined;
  const json = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL) === "http/json";
  const [
    { BasicTracerProvider, BatchSpanProcessor },
    { OTLPTraceExporter },
    { resourceFromAttributes },
    { AsyncLocalStorageContextManager },
    { W3CTraceContextPropagator },
    api,
  ] = await Promise.all([
    import("@opentelemetry/sdk-trace-base"),
    json ? import("@opentelemetry/exporter-trace-otlp-http") : import("@opentelemetry/exporter-trace-otlp-proto"),
    import("@opentelemetry/resources"),
    import("@opentelemetry/context-async-hooks"),
    import("@opentelemetry/core"),
    import("@opentelemetry/api"),
  ]);
  const provider = new BasicTracerProvider({
    // OTEL_RESOURCE_ATTRIBUTES (the session and job ids the sandbox sets) is not read by a bare provider: added here.
    resource: resourceFromAttributes({
      "service.name": env.OTEL_SERVICE_NAME || options.serviceName,
      ...resourceAttributes(env.OTEL_RESOURCE_ATTRIBUTES),
    }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: endpoint }), { scheduledDelayMillis: 500 })],
  });
  if (!trace.setGlobalTracerProvider(provider)) return undefined;
  // Nested spans find their parent through the active context, and calls the harness makes carry it (`traceparent`).
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  return {
    async flush(timeoutMs = DEFAULT_FLUSH_TIMEOUT_MS) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
      try {
        await Promise.race([provider.forceFlush().catch(() => {}), timeout]);
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** `name=value,name2=value2`, values percent-encoded; malformed entries are skipped (they are the runtime's, not the author's). */
function resourceAttributes(value: string | undefined): Record<string, string> {
  const attributes: Record<string, string> = {};
  for (const pair of (value ?? "").split(",")) {
    const at = pair.indexOf("=");
    if (at <= 0) continue;
    try {
      attributes[pair.slice(0, at).trim()] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      // Not percent-encoding: skipped.
    }
  }
  return attributes;
}
