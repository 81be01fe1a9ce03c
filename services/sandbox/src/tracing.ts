// The sandbox's part of a job's trace: one span per session, continuing the
// session request's trace context (the orchestrator's session span), from the
// start request to `exited`. The harness continues this span: its request's
// `trace` and its TRACEPARENT are set to it. Only ids and outcomes recorded.
import { create } from "@bufbuild/protobuf";
import { SpanKind, SpanStatusCode, trace, type Span } from "@opentelemetry/api";
import { TraceContextSchema, type SessionRequest, type TraceContext } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { contextFromTraceparent, GenAi, oz0Tracer, traceContextOf } from "@oz0/serving";

const tracer = oz0Tracer("@oz0/sandbox");

export interface SessionSpan {
  /** The trace context the harness continues: this span's when tracing, else the request's own. */
  readonly harnessTrace: TraceContext | undefined;
  setAttribute(key: string, value: string | number | boolean): void;
  end(options: { status: string; failed: boolean }): void;
}

export function startSessionSpan(request: SessionRequest, options: { isolation: string }): SessionSpan {
  const parent = contextFromTraceparent(request.trace?.traceparent, request.trace?.tracestate);
  const span: Span = tracer.startSpan(
    `sandbox session ${request.agent?.name ?? ""}`.trim(),
    {
      kind: SpanKind.INTERNAL,
      attributes: {
        [GenAi.conversationId]: request.sessionId,
        [GenAi.agentName]: request.agent?.name ?? "",
        "oz0.job.id": request.jobId,
        "oz0.session.id": request.sessionId,
        "oz0.sandbox.isolation": options.isolation,
      },
    },
    parent,
  );
  const own = traceContextOf(trace.setSpan(parent, span));
  // Without tracing in this process the span is not recorded: pass the caller's context on untouched.
  const harnessTrace = span.isRecording() && own.traceparent ? create(TraceContextSchema, own) : request.trace;
  let ended = false;
  return {
    harnessTrace,
    setAttribute: (key, value) => span.setAttribute(key, value),
    end({ status, failed }) {
      if (ended) return;
      ended = true;
      span.setAttribute("oz0.session.status", status);
      if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: status });
      span.end();
    },
  };
}
