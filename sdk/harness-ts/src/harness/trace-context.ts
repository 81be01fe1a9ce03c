// W3C trace context for continuing the session's trace in the harness.
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";

/** The W3C trace context of the session span (empty strings when there is none). */
export interface TraceContext {
  readonly traceparent: string;
  readonly tracestate: string;
  /**
   * A carrier for `propagation.extract(context.active(), carrier)` in
   * OpenTelemetry, or to copy onto outgoing HTTP requests.
   */
  readonly carrier: Readonly<Record<string, string>>;
}

const TRACEPARENT = /^[\da-f]{2}-[\da-f]{32}-[\da-f]{16}-[\da-f]{2}$/;

/**
 * The request's trace context; when it has none, `TRACEPARENT` /
 * `TRACESTATE` from the environment (the convention for processes), so a
 * harness started outside the runtime still joins a trace.
 */
export function traceContextFrom(request: SessionRequest, env: NodeJS.ProcessEnv): TraceContext {
  let traceparent = request.trace?.traceparent ?? "";
  let tracestate = request.trace?.tracestate ?? "";
  if (!TRACEPARENT.test(traceparent)) {
    traceparent = TRACEPARENT.test(env.TRACEPARENT ?? "") ? (env.TRACEPARENT ?? "") : "";
    tracestate = traceparent === "" ? "" : (env.TRACESTATE ?? "");
  }
  const carrier: Record<string, string> = {};
  if (traceparent !== "") carrier.traceparent = traceparent;
  if (tracestate !== "") carrier.tracestate = tracestate;
  return { traceparent, tracestate, carrier };
}
