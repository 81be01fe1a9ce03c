// The events service's part of a job's trace: each lifecycle event accepted
// for publication gets a PRODUCER span continuing the event's own traceparent
// (the span of the job, session or tool call it is about), so the hop to the
// events service shows in the job's trace; the same traceparent goes on as the
// CloudEvents `traceparent` Kafka header. Ids and the type only, no payload.
//
// The Publish RPC itself belongs to its producer's trace too: producers batch
// events and send no trace context of their own, so its SERVER span takes the
// first event's traceparent as its parent and links the other traces of the
// batch; a batch of events that belong to no trace leaves no span (such
// Publish calls used to be most of all traces, each a lone span).
import { ROOT_CONTEXT, SpanKind, trace, type SpanContext } from "@opentelemetry/api";
import type { StreamRequest, UnaryRequest } from "@connectrpc/connect";
import type { PublicEvent, PublishRequest } from "@oz0/proto/oz0/events/v1/events_pb";
import { contextFromTraceparent, oz0Tracer, type UntracedRpc } from "@oz0/serving";

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

/** serve()'s `untracedRpcs`: a Publish joins its events' traces (see the top of this file); other RPCs start their own. */
export function publishTraces(request: UnaryRequest | StreamRequest): UntracedRpc {
  // A producer's stream lives as long as the producer: a span of it would be a trace of its own, hours long. Its
  // events still join their traces, by their PRODUCER spans.
  if (request.method.name === "PublishStream") return "none";
  if (request.method.name !== "Publish" || request.stream) return "root";
  const byTrace = new Map<string, SpanContext>();
  // A batch is mostly events of a few jobs: each trace's traceparent is parsed once (`00-{trace id}-…`).
  const seen = new Set<string>();
  for (const event of (request.message as PublishRequest).events) {
    const key = event.traceparent.slice(0, 35);
    if (!event.traceparent || seen.has(key)) continue;
    seen.add(key);
    const span = trace.getSpanContext(contextFromTraceparent(event.traceparent, undefined, ROOT_CONTEXT));
    if (span && !byTrace.has(span.traceId)) byTrace.set(span.traceId, span);
  }
  const [parent, ...others] = byTrace.values();
  return parent ? { parent, links: others } : "none";
}
