// A public event as a Kafka message in the CloudEvents Kafka protocol
// binding's binary mode: attributes in `ce_*` headers, the event itself as
// JSON in the value, keyed by job id so one job's events stay in order.
import { toJsonString } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { PublicEventSchema, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";

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

export function toKafkaMessage(event: PublicEvent): KafkaMessage {
  const headers: Record<string, string> = {
    ce_specversion: CLOUDEVENTS_SPEC_VERSION,
    ce_id: event.id,
    ce_source: `/oz0/${event.source || "events"}`,
    ce_type: cloudEventType(event.type),
    ce_time: (event.time ? timestampDate(event.time) : new Date()).toISOString(),
    "content-type": "application/json",
  };
  const subject = event.jobId || event.sessionId;
  if (subject) headers.ce_subject = subject;
  if (event.traceparent) headers.traceparent = event.traceparent;
  return {
    // Events outside a job have no order to keep; let Kafka spread them.
    key: event.jobId || null,
    // The position belongs to this service's local log, not to the topic.
    value: toJsonString(PublicEventSchema, { ...event, position: 0n }),
    headers,
  };
}
