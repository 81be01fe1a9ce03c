// The events service's part of a job's trace: each lifecycle event accepted
// for publication gets a PRODUCER span continuing the event's own traceparent
// (the span of the job, session or tool call it is about), so the hop to the
// events service shows in the job's trace; the same traceparent goes on as the
// CloudEvents `traceparent` Kafka header. Ids and the type only, no payload.
import { SpanKind, trace } from "@opentelemetry/api";
import type { PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { contextFromTraceparent, oz0Tracer } from "@oz0/serving";

const tracer = oz0Tracer("@oz0/events");

export function traceAccepted(events: readonly PublicEvent[], options: { topic?: string }): void {
  for (const event of events) {
    if (!event.traceparent) continue;
    const parent = contextFromTraceparent(event.traceparent);
    // Nothing to continue without a valid parent, or nothing records: no span.
    if (!trace.getSpanContext(parent)) continue;
    const span = tracer.startSpan(
      `publish ${event.type}`,
      {
        kind: SpanKind.PRODUCER,
        attributes: {
          "messaging.system": "kafka",
          "messaging.operation.type": "publish",
          ...(options.topic ? { "messaging.destination.name": options.topic } : {}),
          "messaging.message.id": event.id,
          "cloudevents.event_id": event.id,
          "cloudevents.event_type": event.type,
          ...(event.jobId ? { "oz0.job.id": event.jobId } : {}),
        },
      },
      parent,
    );
    span.end();
  }
}
