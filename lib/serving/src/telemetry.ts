// OpenTelemetry for every service, configured only by the standard OTEL_*
// environment variables. With no exporter configured nothing is started, so
// tracing costs nothing; the @opentelemetry/api calls stay no-ops.
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Span } from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { ConnectError, type Interceptor } from "@connectrpc/connect";

export interface TelemetryOptions {
  /**
   * The service's `service.name`, for example `oz0-sandbox`. It wins over
   * OTEL_SERVICE_NAME: the embedded stack and `oz0 dev` start every service
   * with the shell's environment, and one name for four services would make
   * their spans indistinguishable.
   */
  serviceName: string;
}

export interface Telemetry {
  readonly enabled: boolean;
  /** Flush and stop exporting (call on shutdown). */
  shutdown(): Promise<void>;
}

/** True when the OTEL_* environment asks for traces to be exported somewhere. */
export function telemetryConfigured(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED === "true") return false;
  const exporter = env.OTEL_TRACES_EXPORTER;
  if (exporter === "none") return false;
  return Boolean(exporter || env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

export function startTelemetry(options: TelemetryOptions): Telemetry {
  if (!telemetryConfigured()) return { enabled: false, shutdown: async () => {} };
  const sdk = new NodeSDK({
    serviceName: options.serviceName,
    instrumentations: [],
  });
  sdk.start();
  return { enabled: true, shutdown: () => sdk.shutdown() };
}

/** The tracer every Orchestrator Zero component uses. */
export function oz0Tracer(name = "oz0") {
  return trace.getTracer(name);
}

const headerGetter = {
  keys: (carrier: Headers) => [...carrier.keys()],
  get: (carrier: Headers, key: string) => carrier.get(key) ?? undefined,
};
const headerSetter = { set: (carrier: Headers, key: string, value: string) => carrier.set(key, value) };

/** Put the active trace context on outgoing RPCs (`traceparent`, `tracestate`). */
export const traceContextClientInterceptor: Interceptor = (next) => (request) => {
  propagation.inject(context.active(), request.header, headerSetter);
  return next(request);
};

/** Continue the caller's trace: one SERVER span per RPC, active while the handler runs. */
export const traceServerInterceptor: Interceptor = (next) => async (request) => {
  const parent: Context = propagation.extract(context.active(), request.header, headerGetter);
  const span = oz0Tracer("@oz0/serving").startSpan(
    `${request.service.typeName}/${request.method.name}`,
    {
      kind: SpanKind.SERVER,
      attributes: { "rpc.system": "grpc", "rpc.service": request.service.typeName, "rpc.method": request.method.name },
    },
    parent,
  );
  const active = trace.setSpan(parent, span);
  try {
    const response = await context.with(active, () => next(request));
    if (!response.stream) {
      span.end();
      return response;
    }
    return { ...response, message: endWhenDone(response.message, span) };
  } catch (error) {
    failSpan(span, error);
    span.end();
    throw error;
  }
};

async function* endWhenDone<T>(messages: AsyncIterable<T>, span: Span): AsyncIterable<T> {
  try {
    yield* messages;
  } catch (error) {
    failSpan(span, error);
    throw error;
  } finally {
    span.end();
  }
}

/** Record the error's code, never its message: messages may carry content. */
function failSpan(span: Span, error: unknown): void {
  const code = error instanceof ConnectError ? error.code : undefined;
  span.setAttribute("rpc.grpc.status_code", code ?? 2);
  span.setStatus({ code: SpanStatusCode.ERROR });
}
