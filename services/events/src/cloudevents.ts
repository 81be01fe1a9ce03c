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

/** `job.created` → `dev.oz0.job.created.v1`: reverse-DNS prefixed, versioned. */
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
 * a test holds it equal to `toJsonString(PublicEventSchema, ...)`. Built as
 * one string, fields in protobuf-es's order; every string value goes through
 * JSON.stringify, so nothing here trusts that redaction left it plain.
 */
export function publicEventJson(event: PublicEvent): string {
  let json = `{"id":${JSON.stringify(event.id)},"type":${JSON.stringify(event.type)}`;
  if (event.time) json += `,"time":"${timestampJson(event.time.seconds, event.time.nanos)}"`;
  if (event.source) json += `,"source":${JSON.stringify(event.source)}`;
  if (event.jobId) json += `,"jobId":${JSON.stringify(event.jobId)}`;
  if (event.sessionId) json += `,"sessionId":${JSON.stringify(event.sessionId)}`;
  if (event.toolCallId) json += `,"toolCallId":${JSON.stringify(event.toolCallId)}`;
  if (event.operationInvocationId) json += `,"operationInvocationId":${JSON.stringify(event.operationInvocationId)}`;
  if (event.graphRunId) json += `,"graphRunId":${JSON.stringify(event.graphRunId)}`;
  if (event.graphStepId) json += `,"graphStepId":${JSON.stringify(event.graphStepId)}`;
  if (event.agentName) json += `,"agentName":${JSON.stringify(event.agentName)}`;
  if (event.agentVersion) json += `,"agentVersion":${JSON.stringify(event.agentVersion)}`;
  if (event.status) json += `,"status":${JSON.stringify(event.status)}`;
  if (event.tokens) {
    const tokens: Record<string, number> = {};
    if (event.tokens.inputTokens) tokens.inputTokens = event.tokens.inputTokens;
    if (event.tokens.outputTokens) tokens.outputTokens = event.tokens.outputTokens;
    if (event.tokens.cacheReadTokens) tokens.cacheReadTokens = event.tokens.cacheReadTokens;
    if (event.tokens.cacheWriteTokens) tokens.cacheWriteTokens = event.tokens.cacheWriteTokens;
    json += `,"tokens":${JSON.stringify(tokens)}`;
  }
  if (event.attributes) json += `,"attributes":${JSON.stringify(event.attributes)}`;
  if (event.traceparent) json += `,"traceparent":${JSON.stringify(event.traceparent)}`;
  if (event.reduced) json += `,"reduced":true`;
  return `${json}}`;
}

// proto3 JSON for a Timestamp: RFC 3339 in UTC with 0, 3, 6 or 9 fractional
// digits. Events come in bursts from the same second, so the formatted second
// is kept for the next one.
let lastSeconds: bigint | undefined;
let lastSecondText = "";
function timestampJson(seconds: bigint, nanos: number): string {
  if (seconds !== lastSeconds) {
    lastSecondText = new Date(Number(seconds) * 1000).toISOString().slice(0, 19);
    lastSeconds = seconds;
  }
  if (nanos === 0) return `${lastSecondText}Z`;
  const digits = String(nanos).padStart(9, "0");
  const fraction = digits.endsWith("000000")
    ? digits.slice(0, 3)
    : digits.endsWith("000")
      ? digits.slice(0, 6)
      : digits;
  return `${lastSecondText}.${fraction}Z`;
}
