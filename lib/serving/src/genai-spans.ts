// Shared helpers for the OpenTelemetry GenAI semantic conventions, so every
// service names spans and attributes the same way, and a guard that keeps
// content (prompts, model text, tool arguments and results) off every span.
import { context, metrics, propagation, trace, type Context, type Counter, type Histogram } from "@opentelemetry/api";

/** Attribute names of the GenAI conventions this repository uses. */
export const GenAi = {
  operationName: "gen_ai.operation.name",
  providerName: "gen_ai.provider.name",
  requestModel: "gen_ai.request.model",
  responseModel: "gen_ai.response.model",
  responseId: "gen_ai.response.id",
  responseFinishReasons: "gen_ai.response.finish_reasons",
  inputTokens: "gen_ai.usage.input_tokens",
  outputTokens: "gen_ai.usage.output_tokens",
  cacheReadInputTokens: "gen_ai.usage.cache_read.input_tokens",
  cacheCreationInputTokens: "gen_ai.usage.cache_creation.input_tokens",
  conversationId: "gen_ai.conversation.id",
  agentName: "gen_ai.agent.name",
  agentId: "gen_ai.agent.id",
  toolName: "gen_ai.tool.name",
  toolCallId: "gen_ai.tool.call.id",
  tokenType: "gen_ai.token.type",
} as const;

/**
 * Attributes that carry content: no span of ours sets them, and the tracing
 * tests fail when one reaches an exporter. Prompts, answers and tool
 * arguments may hold secrets and personal data.
 */
export const CONTENT_ATTRIBUTES: readonly string[] = [
  "gen_ai.input.messages",
  "gen_ai.output.messages",
  "gen_ai.system_instructions",
  "gen_ai.tool.call.arguments",
  "gen_ai.tool.call.result",
  "gen_ai.tool.definitions",
  "gen_ai.prompt",
  "gen_ai.completion",
];

/** W3C trace context of a context's span, as the harness protocol and CloudEvents carry it. */
export function traceContextOf(ctx: Context = context.active()): { traceparent: string; tracestate: string } {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return { traceparent: carrier.traceparent ?? "", tracestate: carrier.tracestate ?? "" };
}

/** The context a W3C `traceparent` (and `tracestate`) continue; the root context when there is none. */
export function contextFromTraceparent(
  traceparent: string | undefined,
  tracestate?: string,
  base: Context = context.active(),
): Context {
  if (!traceparent) return base;
  const carrier: Record<string, string> = { traceparent };
  if (tracestate) carrier.tracestate = tracestate;
  return propagation.extract(base, carrier);
}

/** True when a span context is being recorded (tracing started and sampled): skip work otherwise. */
export function recording(ctx: Context = context.active()): boolean {
  return trace.getSpan(ctx)?.isRecording() ?? false;
}

export interface GenAiClientMetrics {
  /** `gen_ai.client.token.usage`, one record per token type. */
  tokenUsage: Histogram;
  /** `gen_ai.client.operation.duration`, seconds. */
  operationDuration: Histogram;
}

let clientMetrics: GenAiClientMetrics | undefined;

/**
 * The two GenAI client metrics, created on first use from the global meter
 * provider (a no-op until startTelemetry registers one). Buckets follow the
 * conventions' advice.
 */
export function genAiClientMetrics(): GenAiClientMetrics {
  if (clientMetrics) return clientMetrics;
  const meter = metrics.getMeter("oz0");
  clientMetrics = {
    tokenUsage: meter.createHistogram("gen_ai.client.token.usage", {
      unit: "{token}",
      description: "Tokens used per model call, by gen_ai.token.type",
      advice: {
        explicitBucketBoundaries: [
          1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
        ],
      },
    }),
    operationDuration: meter.createHistogram("gen_ai.client.operation.duration", {
      unit: "s",
      description: "Duration of model calls",
      advice: {
        explicitBucketBoundaries: [
          0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
        ],
      },
    }),
  };
  return clientMetrics;
}

/** A counter and a duration histogram for one kind of unit of work (jobs, sessions, approvals). */
export function workMetrics(name: string, description: string): { count: Counter; duration: Histogram } {
  const meter = metrics.getMeter("oz0");
  return {
    count: meter.createCounter(`oz0.${name}.count`, { unit: `{${name}}`, description: `${description} finished` }),
    duration: meter.createHistogram(`oz0.${name}.duration`, { unit: "s", description: `${description} duration` }),
  };
}
