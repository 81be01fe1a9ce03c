// OpenTelemetry for every service, configured only by the standard OTEL_*
// environment variables. With no exporter configured nothing is started, so
// tracing costs nothing; the @opentelemetry/api calls stay no-ops.
import {
  context,
  propagation,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";
import { NodeSDK } from "@opentelemetry/sdk-node";
import { Code, ConnectError, type Interceptor, type StreamRequest, type UnaryRequest } from "@connectrpc/connect";

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

/**
 * Where the SERVER span of an RPC that arrived with no trace context goes:
 * `"root"`, a trace of its own (the default); `"none"`, no span at all (work
 * that belongs to no trace, so it leaves none); or a span in the trace its
 * message names (`parent`), linked to any other traces it serves (`links`).
 */
export type UntracedRpc = "root" | "none" | { parent: SpanContext; links: readonly SpanContext[] };

/** Decides UntracedRpc per request (serve()'s `untracedRpcs`). */
export type UntracedRpcPolicy = (request: UnaryRequest | StreamRequest) => UntracedRpc;

/**
 * Continue the caller's trace: one SERVER span per RPC, active while the
 * handler runs. A request with no trace context goes where `untraced` says
 * (a trace of its own when there is no policy).
 */
export function traceServer(options: { untraced?: UntracedRpcPolicy } = {}): Interceptor {
  return (next) => async (request) => {
    let parent: Context = propagation.extract(context.active(), request.header, headerGetter);
    let links: Link[] = [];
    const choice = trace.getSpanContext(parent) === undefined ? (options.untraced?.(request) ?? "root") : "root";
    if (choice === "none") return next(request);
    if (choice !== "root") {
      parent = trace.setSpanContext(parent, choice.parent);
      links = choice.links.map((linked) => ({ context: linked }));
    }
    const span = oz0Tracer("@oz0/serving").startSpan(
      `${request.service.typeName}/${request.method.name}`,
      {
        kind: SpanKind.SERVER,
        attributes: {
          "rpc.system": "grpc",
          "rpc.service": request.service.typeName,
          "rpc.method": request.method.name,
        },
        links,
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
}

/** traceServer() with no policy: every RPC without a caller's trace starts one. */
export const traceServerInterceptor: Interceptor = traceServer();

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

/** Record the error's code, never its message (messages may carry content): the status message is the code's name. */
function failSpan(span: Span, error: unknown): void {
  const code = error instanceof ConnectError ? error.code : Code.Unknown;
  span.setAttribute("rpc.grpc.status_code", code);
  span.setStatus({ code: SpanStatusCode.ERROR, message: Code[code] ?? "Unknown" });
}
