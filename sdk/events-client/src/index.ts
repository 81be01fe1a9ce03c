// @oz0/events-client: what producers of lifecycle events share with the events
// service (the typed list of lifecycle types) and the client they publish
// with. No Kafka client and no SQLite build: a producer that imports it makes
// gRPC calls and nothing more.
export { LIFECYCLE_EVENTS, LIFECYCLE_TYPES, isLifecycleType } from "./lifecycle-types.js";
export type { LifecycleSource, LifecycleType, LifecycleTypeInfo } from "./lifecycle-types.js";
export {
  createEventPublisher,
  eventsTransport,
  logPublishResponse,
  MAX_PUBLISH_BYTES,
  newEventId,
  rawAttributes,
  rawEvent,
  rawEventBytes,
} from "./event-publisher.js";
export { createPublishSender, PUBLISH_STREAM_IDLE_MS } from "./publish-sender.js";
export { holdsSessionToken, isIdentifier, publicIdentifier } from "./public-identifier.js";
export type { PublishAnswer, PublishSender } from "./publish-sender.js";
export type {
  EventPublisher,
  EventPublisherOptions,
  PublisherLogger,
  RawEventInit,
  TokenCountsInit,
} from "./event-publisher.js";
