// The proxy's part of a job's trace: one `chat {model}` span per model call
// (OpenTelemetry GenAI conventions) in the trace its session token was minted
// in, below the harness's span when the harness's `traceparent` names one of
// that trace (its turn), with the usage the metering records and one child
// span per attempt upstream. The GenAI client metrics are recorded from the same records.
// Nothing of the request or the answer is put on a span: only counts, names,
// ids and outcomes (the answer's id, the model that gave it, why it ended, the
// provider's host); an error span's status message is its outcome's name.
import {
  context,
  propagation,
  ProxyTracerProvider,
  SpanKind,
  SpanStatusCode,
  trace,
  type Context,
  type Span,
  type SpanContext,
} from "@opentelemetry/api";
import { holdsSessionToken } from "@oz0/events-client";
import { contextFromTraceparent, GenAi, genAiClientMetrics, oz0Tracer, recording } from "@oz0/serving";
import type { AttemptRecord, CallRecord } from "./proxy-store.js";

const tracer = oz0Tracer("@oz0/llm-proxy");

const headerGetter = {
  keys: (carrier: Record<string, string | string[] | undefined>) => Object.keys(carrier),
  get: (carrier: Record<string, string | string[] | undefined>, key: string) => carrier[key],
};

export interface TracedModelCall {
  /** The incoming request's headers (where the caller's `traceparent` is). */
  incoming: Record<string, string | string[] | undefined>;
  /** The traceparent its session token was minted in (TokenRecord.traceparent); none: the call's span starts a trace. */
  sessionTrace: string | undefined;
  /** Headers sent upstream: their `traceparent` is replaced by the chat span's. */
  outgoing: Record<string, string>;
  provider: string;
  /** `chat` for messages and chat completions. */
  operation: string;
  model: string | undefined;
  /** The provider's base URL (`server.address`, `server.port`); none for the in-process scripted provider. */
  upstream?: string | undefined;
}

/** Per provider base URL (a few): parsing it per call cost more than the span. */
const serverAttributesByUrl = new Map<string, Readonly<Record<string, string | number>>>();

/** `server.address` and `server.port` of the provider's base URL. */
function serverAttributes(upstream: string | undefined): Readonly<Record<string, string | number>> {
  if (!upstream) return {};
  let attributes = serverAttributesByUrl.get(upstream);
  if (!attributes) {
    attributes = parseServerAttributes(upstream);
    serverAttributesByUrl.set(upstream, attributes);
  }
  return attributes;
}

function parseServerAttributes(upstream: string): Record<string, string | number> {
  try {
    const url = new URL(upstream);
    const port = url.port ? Number(url.port) : url.protocol === "https:" ? 443 : 80;
    return { "server.address": url.hostname.replace(/^\[(.*)\]$/, "$1"), "server.port": port };
  } catch {
    return {};
  }
}

/** A model's name as providers write them (`claude-sonnet-4-5-20250929`, `gpt-4o`, `meta-llama/llama-3-70b`). */
const MODEL_NAME = /^[A-Za-z0-9][A-Za-z0-9_.:@+/-]{0,127}$/;

/**
 * The model as it may go on a span or a metric, or undefined. The model is the session's word, forwarded as
 * written (a price table's family key prices any name it starts): held whole, a request of megabytes made a
 * span of megabytes (and a batch export the collector refuses, with every other call's spans in it), prose or
 * the session's own token reached the collector, and each new name was one more series of the client metrics,
 * kept for the process's life.
 */
function modelForSpan(model: string | undefined): string | undefined {
  return model !== undefined && MODEL_NAME.test(model) && !holdsSessionToken(model) ? model : undefined;
}

/** The chat span's attributes at its start; no spreads (on Node 20 each cost about a microsecond a call). */
function spanAttributes(call: TracedModelCall, model: string | undefined): Record<string, string | number> {
  const attributes: Record<string, string | number> = {
    [GenAi.operationName]: call.operation,
    [GenAi.providerName]: call.provider,
  };
  if (model) attributes[GenAi.requestModel] = model;
  return Object.assign(attributes, serverAttributes(call.upstream));
}

/** What the API's tracer provider delegates to while no SDK is registered. */
const NO_TRACER_PROVIDER = new ProxyTracerProvider().getDelegate();

/**
 * Whether a tracer provider is registered (startTelemetry's, or a test's). While none is, the
 * chat span would record nothing from start to end, and a call makes none: extracting the
 * caller's context, starting, entering and ending a span that records nothing were steps of
 * the API's before every request went upstream.
 */
function tracing(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegate() !== NO_TRACER_PROVIDER;
}

/**
 * The chat span's parent: the harness's span when its `traceparent` is in the session's trace, else the session's
 * own span (the orchestrator's). A harness names whatever trace it likes; continued as it was, a session could put
 * its calls' spans, and the usage events sent from inside them, in another job's trace, or hide them from its own.
 * `foreign`: it named another trace (or a malformed one), which the span says.
 */
function parentOf(call: TracedModelCall): { parent: Context; foreign: boolean } {
  const base = context.active();
  const session = call.sessionTrace !== undefined ? contextFromTraceparent(call.sessionTrace, undefined, base) : base;
  const own = trace.getSpanContext(session);
  if (call.incoming.traceparent === undefined) return { parent: session, foreign: false };
  const harness = trace.getSpanContext(propagation.extract(base, call.incoming, headerGetter));
  if (harness === undefined || own === undefined || harness.traceId !== own.traceId)
    return { parent: session, foreign: true };
  // Below the harness's span, sampled as its session is: the harness's flags (00) would otherwise keep the call's
  // span out of the trace it belongs to. Nothing else of the harness's context is taken (its tracestate and
  // baggage would go on to the provider).
  const parent: SpanContext = {
    traceId: own.traceId,
    spanId: harness.spanId,
    traceFlags: own.traceFlags,
    isRemote: true,
  };
  if (own.traceState) parent.traceState = own.traceState;
  return { parent: trace.setSpanContext(session, parent), foreign: false };
}

/** Runs a model call inside its `chat {model}` span; metering records land on it (see recordCall). */
export async function traceModelCall(call: TracedModelCall, run: () => Promise<void>): Promise<void> {
  if (!tracing()) return run();
  const { parent, foreign } = parentOf(call);
  const model = modelForSpan(call.model);
  const span = tracer.startSpan(
    model ? `${call.operation} ${model}` : call.operation,
    {
      kind: SpanKind.CLIENT,
      attributes: spanAttributes(call, model),
    },
    parent,
  );
  if (foreign) span.setAttribute("oz0.llm.foreign_traceparent", true);
  const active = trace.setSpan(parent, span);
  // The provider sees our span as the caller, not the harness's.
  if (span.isRecording()) propagation.inject(active, call.outgoing);
  try {
    await context.with(active, run);
  } catch (error) {
    const errorType = (error as { code?: string }).code ?? "internal";
    span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    span.setAttribute("error.type", errorType);
    throw error;
  } finally {
    span.end();
  }
}

/** Puts a finished call's usage on the active chat span and into the GenAI client metrics. */
export function recordCall(record: CallRecord): void {
  const model = modelForSpan(record.model);
  const metricAttributes: Record<string, string> = {
    [GenAi.operationName]: "chat",
    [GenAi.providerName]: record.provider,
  };
  if (model) metricAttributes[GenAi.requestModel] = model;
  const metrics = genAiClientMetrics();
  // Object.assign, not spreads: every call records these, and on Node 20 a spread copy that
  // gains a field costs about a microsecond.
  metrics.operationDuration.record(
    record.latencyMs / 1000,
    record.outcome === "ok" ? metricAttributes : Object.assign({ "error.type": record.outcome }, metricAttributes),
  );
  if (record.usage.input > 0)
    metrics.tokenUsage.record(record.usage.input, Object.assign({ [GenAi.tokenType]: "input" }, metricAttributes));
  if (record.usage.output > 0)
    metrics.tokenUsage.record(record.usage.output, Object.assign({ [GenAi.tokenType]: "output" }, metricAttributes));
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  if (model) span.setAttribute(GenAi.requestModel, model);
  span.setAttributes({
    [GenAi.inputTokens]: record.usage.input,
    [GenAi.outputTokens]: record.usage.output,
    [GenAi.cacheReadInputTokens]: record.usage.cacheRead,
    [GenAi.cacheCreationInputTokens]: record.usage.cacheWrite,
    [GenAi.conversationId]: record.session,
    [GenAi.agentName]: record.agent,
    "oz0.job.id": record.job,
    "oz0.llm.attempts": record.attempts,
    "oz0.llm.outcome": record.outcome,
    "oz0.llm.cost_usd": record.costUsd,
    "oz0.llm.estimated": record.estimated,
    "http.response.status_code": record.status,
  });
  if (record.outcome !== "ok") {
    span.setAttribute("error.type", record.outcome);
    span.setStatus({ code: SpanStatusCode.ERROR, message: record.outcome });
  }
}

/**
 * Puts what the provider said of its answer on the active chat span: why it
 * ended (`gen_ai.response.finish_reasons`), its id and the model that gave it
 * (`gen_ai.response.id`, `gen_ai.response.model`), as far as it said.
 */
export function recordAnswer(answer: {
  finishReason?: string | undefined;
  id?: string | undefined;
  model?: string | undefined;
}): void {
  const span = trace.getActiveSpan();
  if (!span?.isRecording()) return;
  span.setAttributes({
    ...(answer.finishReason !== undefined ? { [GenAi.responseFinishReasons]: [answer.finishReason] } : {}),
    ...(answer.id !== undefined ? { [GenAi.responseId]: answer.id } : {}),
    ...(modelForSpan(answer.model) !== undefined ? { [GenAi.responseModel]: answer.model } : {}),
  });
}

/** One child span per attempt upstream, from the attempt's own start and latency. */
export function recordAttempt(record: AttemptRecord): void {
  if (!recording()) return;
  const start = record.startedAt.getTime();
  const model = modelForSpan(record.model);
  const span: Span = tracer.startSpan(`attempt ${record.attempt}`, {
    kind: SpanKind.CLIENT,
    startTime: start,
    attributes: {
      [GenAi.providerName]: record.provider,
      ...(model ? { [GenAi.requestModel]: model } : {}),
      "oz0.llm.attempt": record.attempt,
      "oz0.llm.outcome": record.outcome,
      "http.response.status_code": record.status,
      [GenAi.inputTokens]: record.usage.input,
      [GenAi.outputTokens]: record.usage.output,
    },
  });
  if (record.outcome !== "ok") span.setStatus({ code: SpanStatusCode.ERROR, message: record.outcome });
  span.end(start + record.latencyMs);
}
