// Session lifecycle events for the events service, which redacts and
// publishes them. Publishing never blocks or fails a session.
import { createEventPublisher, rawEvent, type EventPublisher } from "@oz0/events-client";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { SessionStatus, type SessionExited } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import type { Logger } from "@oz0/serving";
import type { SandboxSession } from "./sandbox-session.js";
import type { SessionLifecycleListener } from "./session-registry.js";

const STATUS_NAMES: Record<SessionStatus, string> = {
  [SessionStatus.UNSPECIFIED]: "unknown",
  [SessionStatus.RUNNING]: "running",
  [SessionStatus.COMPLETED]: "completed",
  [SessionStatus.FAILED]: "failed",
  [SessionStatus.CANCELLED]: "cancelled",
  [SessionStatus.TIMED_OUT]: "timed_out",
};

export interface LifecycleEvents {
  listener: SessionLifecycleListener;
  close(): Promise<void>;
}

export function createLifecycleEvents(options: { url: string; logger: Logger; token?: string }): LifecycleEvents {
  const publisher: EventPublisher = createEventPublisher({
    url: options.url,
    logger: options.logger,
    ...(options.token ? { token: options.token } : {}),
  });
  const common = (session: SandboxSession): Parameters<typeof rawEvent>[1] => ({
    source: "sandbox",
    jobId: session.jobId,
    sessionId: session.id,
    agentName: session.request.agent?.name ?? "",
    agentVersion: session.request.agent !== undefined ? String(session.request.agent.version) : "",
    traceparent: session.request.trace?.traceparent ?? "",
  });
  return {
    listener: {
      started(session) {
        publisher.publish(
          rawEvent("session.started", {
            ...common(session),
            status: "running",
            attributes: { pid: session.pid, isolation: session.isolationName },
          }),
        );
      },
      ended(session) {
        const exited = lastExited(session);
        publisher.publish(
          rawEvent("session.ended", {
            ...common(session),
            status: STATUS_NAMES[session.status],
            attributes: {
              error_code: exited?.errorCode ?? "",
              // A name (`max_turns`), as every other event's stop reason, not the proto's number.
              ...(exited?.result
                ? { stop_reason: (StopReason[exited.result.stopReason] ?? "UNSPECIFIED").toLowerCase() }
                : {}),
              turns: exited?.result?.turns ?? 0,
            },
          }),
        );
      },
    },
    // The publisher's 5 s: while Kafka is behind, the events service holds each Publish up to a
    // second (back-pressure), and a close bounded at 2 s dropped what two held calls left queued.
    close: () => publisher.close(),
  };
}

function lastExited(session: SandboxSession): SessionExited | undefined {
  const latest = session.log.latest?.message;
  return latest?.case === "exited" ? latest.value : undefined;
}
