// Where a usage event goes after each logical call: the events service when
// OZ0_EVENTS_URL is set. Counts and ids only, never content or keys.
import { createEventPublisher, rawEvent, type EventPublisher } from "@oz0/events-client";
import { context } from "@opentelemetry/api";
import { traceContextOf, type Logger } from "@oz0/serving";
import type { CallRecord } from "./proxy-store.js";

/** The event type of a finished model call (for the events service's allowlist). */
export const USAGE_EVENT_TYPE = "llm.call_completed";

export interface UsageSink {
  /** Never blocks and never throws. */
  callCompleted(call: CallRecord): void;
  close(): Promise<void>;
}

/**
 * The attributes of a usage event: the whole list, so the allowlist can be checked against it. `nominal`: the call
 * went to a scripted provider, whose prices are for show (nobody was called, nobody charged), as `oz0 usage` says.
 */
export function usageEventAttributes(call: CallRecord, nominal = false): Record<string, unknown> {
  return {
    operation_id: call.operationId,
    provider: call.provider,
    model: call.model,
    wire: call.wire,
    stream: call.stream,
    http_status: call.status,
    attempts: call.attempts,
    reasoning_tokens: call.usage.reasoning,
    cost_usd: call.costUsd,
    latency_ms: call.latencyMs,
    ttft_ms: call.ttftMs,
    estimated: call.estimated,
    nominal,
  };
}

export function eventsUsageSink(options: {
  url: string;
  logger: Logger;
  token?: string;
  /** Whether a provider's prices are nominal (a scripted provider). Default: none is. */
  nominal?: (provider: string) => boolean;
}): UsageSink {
  const publisher: EventPublisher = createEventPublisher({
    url: options.url,
    logger: options.logger,
    ...(options.token ? { token: options.token } : {}),
  });
  return {
    callCompleted(call) {
      // Sent from inside the call's chat span: the event joins the job's trace like the other lifecycle events.
      const { traceparent } = traceContextOf(context.active());
      publisher.publish(
        rawEvent(USAGE_EVENT_TYPE, {
          ...(traceparent ? { traceparent } : {}),
          source: "llm-proxy",
          jobId: call.job,
          sessionId: call.session,
          agentName: call.agent,
          status: call.outcome,
          tokens: {
            inputTokens: call.usage.input,
            outputTokens: call.usage.output,
            cacheReadTokens: call.usage.cacheRead,
            cacheWriteTokens: call.usage.cacheWrite,
          },
          attributes: usageEventAttributes(call, options.nominal?.(call.provider) ?? false),
        }),
      );
    },
    // The publisher's 5 s: while Kafka is behind, the events service holds each Publish up to a
    // second (back-pressure), and a close bounded at 2 s dropped what two held calls left queued.
    close: () => publisher.close(),
  };
}

/** A sink that keeps events in memory (tests, and the default without OZ0_EVENTS_URL keeps none). */
export function memoryUsageSink(keep = false): UsageSink & { readonly events: CallRecord[] } {
  const events: CallRecord[] = [];
  return {
    events,
    callCompleted(call) {
      if (keep) events.push(call);
    },
    close: async () => {},
  };
}
