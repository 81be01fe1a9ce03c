// The relay's Kafka producer, in a worker thread of its own. Encoding a
// produce request (a record and a buffer per CloudEvents header, CRCs) was
// the largest cost of the events service's single thread, ahead of the
// Publish calls themselves; here it runs beside them. The relay (main thread)
// still decides what is sent and when it counts as delivered: it hands this
// worker one batch of stored events at a time and waits for the broker's
// acknowledgement before it moves its cursor. One idempotent producer lives as
// long as the worker, so a batch retried after a lost acknowledgement is not
// written twice.
import { parentPort, workerData } from "node:worker_threads";
import type { LogEntry } from "kafkajs";
import { toKafkaMessage, type KafkaMessage } from "./cloudevents.js";
import { poolSmallZeroFilledBuffers } from "./kafka-allocation.js";
import { kafkaFailure, kafkajsSecurity, type KafkaFailure, type KafkaSecurity } from "./kafka-security.js";
import { useFasterKafkajsPaths } from "./kafkajs-hot-paths.js";

export interface ProducerWorkerData {
  brokers: string[];
  topic: string;
  partitions: number;
  clientId: string;
  /** SASL and TLS; unset: PLAINTEXT. */
  security?: KafkaSecurity;
}

export type ToProducerWorker =
  /** Connect and make sure the topic exists; answer `done`. */
  | { kind: "connect"; id: number }
  /** Send these stored events (their JSON) in one produce request; answer `done` once acknowledged. */
  | { kind: "send"; id: number; events: string[] }
  /** Disconnect the producer and end the thread. */
  | { kind: "close" };

export type FromProducerWorker =
  /** `error` is kafkajs's message (never the password: kafkajs does not put it in one), `failure` what kind it is. */
  | { kind: "done"; id: number; connected: boolean; error?: string; failure?: KafkaFailure }
  | { kind: "log"; namespace: string; label: string; message: string; broker?: unknown; error?: unknown };

// This thread runs nothing but the producer (see kafka-allocation.ts).
poolSmallZeroFilledBuffers();
// Before kafkajs loads, which takes its record encoder and its grouping by partition as it does (kafkajs-hot-paths.ts).
useFasterKafkajsPaths();
const { Kafka, logLevel } = await import("kafkajs");

const port = parentPort!;
const options = workerData as ProducerWorkerData;
const post = (message: FromProducerWorker): void => port.postMessage(message);

const kafka = new Kafka({
  clientId: options.clientId,
  brokers: options.brokers,
  ...kafkajsSecurity(options.security),
  connectionTimeout: 3_000,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
  logLevel: logLevel.WARN,
  // kafkajs entries carry broker addresses and error names, never event content.
  logCreator: () => (entry: LogEntry) => {
    const { message, broker, error } = entry.log as { message: string; broker?: unknown; error?: unknown };
    post({ kind: "log", namespace: entry.namespace, label: entry.label, message, broker, error });
  },
});
const producer = kafka.producer({
  idempotent: true,
  maxInFlightRequests: 1,
  allowAutoTopicCreation: true,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
});
let connected = false;
let topicReady = false;

async function connect(): Promise<void> {
  if (!connected) {
    await producer.connect();
    connected = true;
  }
  if (!topicReady) await ensureTopic();
}

/**
 * A message as kafkajs's produce request copies it per record
 * (`{ ...message, offsetDelta, timestampDelta }`): with both fields already
 * there (kafkajs sets them), the copy keeps the message's shape. On Node 20 a
 * spread that adds fields cost 3-7 µs a message, one that only sets them
 * about 0.6.
 */
interface ShapedMessage extends KafkaMessage {
  offsetDelta: number;
  timestampDelta: number;
}

async function send(events: string[]): Promise<void> {
  await connect();
  const messages = new Array<ShapedMessage>(events.length);
  for (let i = 0; i < events.length; i++) {
    const { key, value, headers } = toKafkaMessage(events[i]!);
    messages[i] = { key, value, headers, offsetDelta: 0, timestampDelta: 0 };
  }
  await producer.send({ topic: options.topic, acks: -1, messages });
}

// The service creates its topic with several partitions (keyed by job, so
// order per job holds); broker auto-creation would give only its default.
async function ensureTopic(): Promise<void> {
  const admin = kafka.admin();
  try {
    await admin.connect();
    await admin.createTopics({
      topics: [{ topic: options.topic, numPartitions: options.partitions }],
      waitForLeaders: true,
    });
    topicReady = true;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

// The relay sends one request at a time and waits for its answer, so requests
// never overlap here.
port.on("message", (request: ToProducerWorker) => {
  if (request.kind === "close") {
    void producer
      .disconnect()
      .catch(() => undefined)
      .then(() => process.exit(0));
    return;
  }
  (request.kind === "send" ? send(request.events) : connect()).then(
    () => post({ kind: "done", id: request.id, connected }),
    (error: unknown) =>
      post({
        kind: "done",
        id: request.id,
        connected,
        error: error instanceof Error ? error.message : String(error),
        failure: kafkaFailure(error),
      }),
  );
});
