// @oz0/test-infra: real Apache Kafka and PostgreSQL for tests that need their
// own (for example to stop and restart a broker). `npm test` uses the same
// launchers to start one of each for the whole run.
export {
  DEFAULT_KAFKA_VERSION,
  ensureKafkaJars,
  kafkaCacheDir,
  kafkaJarsCached,
  startKafka,
  waitForKafka,
} from "./kafka-launcher.js";
export type { KafkaJarsOptions, KafkaOptions, RunningKafka, ScramUser } from "./kafka-launcher.js";
export { findPostgresBinDir, startPostgres, waitForPostgres } from "./postgres-launcher.js";
export type { PostgresOptions, RunningPostgres } from "./postgres-launcher.js";
export { InfrastructureError } from "./infrastructure-error.js";
export { startTestInfrastructure } from "./test-infrastructure.js";
export type { TestInfrastructure } from "./test-infrastructure.js";
export { testNeeds } from "./test-needs.js";
export type { TestNeeds } from "./test-needs.js";
export { dockerEngineAnswers } from "./docker-engine.js";
export { freePort, freePorts } from "./free-port.js";
export { decodeMetrics, decodeTraces, fetchReceived, startOtlpReceiver } from "./otlp-receiver.js";
export type { AttributeValue, OtlpReceiver, ReceivedMetricPoint, ReceivedSpan } from "./otlp-receiver.js";
