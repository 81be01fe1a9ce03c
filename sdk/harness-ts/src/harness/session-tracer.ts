// An OpenTelemetry tracer for harness authors whose spans continue the
// session's trace (the sandbox's session span, from the request's `trace` or
// TRACEPARENT) when no span is active. It is the global tracer underneath:
// spans are exported once the harness process registers an SDK (for example
// @opentelemetry/sdk-node configured by OTEL_*); without one it costs nothing.
import {
  context,
  ROOT_CONTEXT,
  trace,
  TraceFlags,
  type Context,
  type Span,
  type SpanOptions,
  type Tracer,
} from "@opentelemetry/api";
import type { TraceContext } from "./trace-context.js";

/** The OpenTelemetry context of the session's span (the root context when the session has none). */
export function sessionContext(traceContext: TraceContext): Context {
  const match = /^([\da-f]{2})-([\da-f]{32})-([\da-f]{16})-([\da-f]{2})$/.exec(traceContext.traceparent);
  if (!match) return ROOT_CONTEXT;
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: match[2]!,
    spanId: match[3]!,
    // Only the sampled bit is defined by W3C trace context level 1.
    traceFlags: Number.parseInt(match[4]!, 16) & TraceFlags.SAMPLED,
    isRemote: true,
  });
}

export function sessionTracer(options: { name: string; version?: string; trace: TraceContext }): Tracer {
  const inner = trace.getTracer(options.name, options.version);
  const session = sessionContext(options.trace);
  // A span started with no active span becomes a child of the session's.
  const parentOf = (ctx: Context | undefined): Context => {
    const base = ctx ?? context.active();
    return trace.getSpan(base) ? base : session;
  };
  const startSpan = (name: string, spanOptions?: SpanOptions, ctx?: Context): Span =>
    inner.startSpan(name, spanOptions, parentOf(ctx));
  function startActiveSpan<F extends (span: Span) => unknown>(name: string, fn: F): ReturnType<F>;
  function startActiveSpan<F extends (span: Span) => unknown>(name: string, opts: SpanOptions, fn: F): ReturnType<F>;
  function startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    opts: SpanOptions,
    ctx: Context,
    fn: F,
  ): ReturnType<F>;
  function startActiveSpan<F extends (span: Span) => unknown>(
    name: string,
    a: F | SpanOptions,
    b?: F | Context,
    c?: F,
  ): ReturnType<F> {
    const fn = (c ?? (typeof b === "function" ? b : a)) as F;
    const opts = typeof a === "function" ? undefined : a;
    const ctx = typeof b === "function" ? undefined : b;
    const parent = parentOf(ctx);
    const span = inner.startSpan(name, opts, parent);
    return context.with(trace.setSpan(parent, span), () => fn(span)) as ReturnType<F>;
  }
  return { startSpan, startActiveSpan };
}
