// @oz0/events: the events service. Producers publish with @oz0/events-client.
export { startEvents, DEFAULT_RETENTION_MS, DEFAULT_TOPIC } from "./start-events.js";
export type { EventsConfig, RunningEvents } from "./start-events.js";
export { EVENT_POLICY, FINISH_SUMMARY, publicAttributes, redactEvent } from "./redaction-policy.js";
export type { RedactionOutcome } from "./redaction-policy.js";
export { buildTranscript } from "./transcript.js";
export { cloudEventType, publicEventJson, toKafkaMessage, CLOUDEVENTS_SPEC_VERSION } from "./cloudevents.js";
export type { KafkaMessage } from "./cloudevents.js";
export { poolSmallZeroFilledBuffers } from "./kafka-allocation.js";
