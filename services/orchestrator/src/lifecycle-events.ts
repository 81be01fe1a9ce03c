// LifecycleSink over @oz0/events' publisher: raw lifecycle events go to the
// events service (which redacts and publishes them); a job never waits on it.
import { createEventPublisher, rawEvent, type EventPublisher } from "@oz0/events";
import type { Logger } from "@oz0/serving";
import type { LifecycleSink } from "./session-runner.js";

export function createLifecycleSink(options: { url: string; logger: Logger }): LifecycleSink {
  const publisher: EventPublisher = createEventPublisher({ url: options.url, logger: options.logger });
  return {
    publish(type, init) {
      publisher.publish(rawEvent(type, { source: "orchestrator", ...init }));
    },
    close: () => publisher.close({ timeoutMs: 2_000 }),
  };
}
