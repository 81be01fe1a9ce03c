// @oz0/events: the events service and the client producers publish with.
export { createEventPublisher, rawEvent } from "./event-publisher.js";
export type {
  EventPublisher,
  EventPublisherOptions,
  PublisherLogger,
  RawEventInit,
  TokenCountsInit,
} from "./event-publisher.js";
