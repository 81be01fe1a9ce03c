// A public event as a Kafka message in the CloudEvents Kafka protocol
// binding's binary mode: attributes in `ce_*` headers, the event itself as
// JSON in the value, keyed by job id so one job's events stay in order.
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";

export const CLOUDEVENTS_SPEC_VERSION = "1.0";

export interface KafkaMessage {
  key: string | null;
  value: string;
  headers: Record<string, string>;
}

/** `job.started` → `dev.oz0.job.started.v1`: reverse-DNS prefixed, versioned. */
export function cloudEventType(type: string): string {
  return `dev.oz0.${type}.v1`;
}

/**
 * A stored public event (its proto3 JSON, as the outbox keeps it) as a Kafka
 * message. The JSON is shipped as is: parsing it into a message and printing
 * it again would cost more than everything else the relay does.
 */
export function toKafkaMessage(eventJson: string): KafkaMessage {
  const event = JSON.parse(eventJson) as {
    id: string;
    type: string;
    time?: string;
    source?: string;
    jobId?: string;
    sessionId?: string;
    traceparent?: string;
  };
  const headers: Record<string, string> = {
    ce_specversion: CLOUDEVENTS_SPEC_VERSION,
    ce_id: event.id,
    ce_source: `/oz0/${event.source || "events"}`,
    ce_type: cloudEventType(event.type),
    // proto3 JSON prints a Timestamp in RFC 3339, as CloudEvents wants it.
    ce_time: event.time ?? new Date().toISOString(),
    "content-type": "application/json",
  };
  const subject = event.jobId || event.sessionId;
  if (subject) headers.ce_subject = subject;
  if (event.traceparent) headers.traceparent = event.traceparent;
  // Events outside a job have no order to keep; let Kafka spread them.
  return { key: event.jobId || null, value: eventJson, headers };
}

/**
 * The JSON the outbox stores and Kafka carries: the event's proto3 JSON
 * without its position (which belongs to the local log only). Written by hand
 * because protobuf-es's reflective printer was the largest cost per event;
 * a test holds it equal to `toJsonString(PublicEventSchema, ...)`.
 */
export function publicEventJson(event: PublicEvent): string {
  const out: Record<string, unknown> = { id: event.id, type: event.type };
  if (event.time) out.time = timestampJson(event.time.seconds, event.time.nanos);
  const strings = [
    ["source", event.source],
    ["jobId", event.jobId],
    ["sessionId", event.sessionId],
    ["toolCallId", event.toolCallId],
    ["operationInvocationId", event.operationInvocationId],
    ["graphRunId", event.graphRunId],
    ["graphStepId", event.graphStepId],
    ["agentName", event.agentName],
    ["agentVersion", event.agentVersion],
    ["status", event.status],
  ] as const;
  for (const [name, value] of strings) if (value) out[name] = value;
  if (event.tokens) {
    const tokens: Record<string, number> = {};
    if (event.tokens.inputTokens) tokens.inputTokens = event.tokens.inputTokens;
    if (event.tokens.outputTokens) tokens.outputTokens = event.tokens.outputTokens;
    if (event.tokens.cacheReadTokens) tokens.cacheReadTokens = event.tokens.cacheReadTokens;
    if (event.tokens.cacheWriteTokens) tokens.cacheWriteTokens = event.tokens.cacheWriteTokens;
    out.tokens = tokens;
  }
  if (event.attributes) out.attributes = event.attributes;
  if (event.traceparent) out.traceparent = event.traceparent;
  if (event.reduced) out.reduced = true;
  return JSON.stringify(out);
}

// proto3 JSON for a Timestamp: RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits.
function timestampJson(seconds: bigint, nanos: number): string {
  const iso = new Date(Number(seconds) * 1000).toISOString().slice(0, 19);
  if (nanos === 0) return `${iso}Z`;
  const digits = String(nanos).padStart(9, "0");
  const fraction = digits.endsWith("000000") ? digits.slice(0, 3) : digits.endsWith("000") ? digits.slice(0, 6) : digits;
  return `${iso}.${fraction}Z`;
}
