// Delivers the outbox to Kafka: the oldest undelivered events first, one batch
// at a time, marking them delivered only once the broker acknowledged them
// (acks=all). While the broker is down the batch stays pinned and is retried
// as is, by the same idempotent producer, so a batch the broker did write
// before an acknowledgement was lost is not written twice; events keep their
// order per job because nothing later is sent before it.
import { Kafka, logLevel, type LogEntry, type Producer } from "kafkajs";
import type { Logger } from "@oz0/serving";
import { toKafkaMessage } from "./cloudevents.js";
import type { Outbox, StoredEvent } from "./outbox.js";

export interface KafkaRelayOptions {
  brokers: string[];
  topic: string;
  outbox: Outbox;
  logger: Logger;
  /** Partitions when the relay creates the topic. Default 3. */
  partitions?: number;
  /** Events per produce request. Default 500. */
  batchSize?: number;
  clientId?: string;
}

export class KafkaRelay {
  private readonly kafka: Kafka;
  private readonly producer: Producer;
  private readonly logger: Logger;
  private connected = false;
  private topicReady = false;
  private stopping = false;
  private wakeUp: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private outage: { since: number } | undefined;

  constructor(private readonly options: KafkaRelayOptions) {
    this.logger = options.logger;
    this.kafka = new Kafka({
      clientId: options.clientId ?? "oz0-events",
      brokers: options.brokers,
      connectionTimeout: 3_000,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
      logLevel: logLevel.WARN,
      logCreator: () => (entry: LogEntry) => this.kafkaLog(entry),
    });
    this.producer = this.kafka.producer({
      idempotent: true,
      maxInFlightRequests: 1,
      allowAutoTopicCreation: true,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2_000 },
    });
  }

  start(): void {
    this.loop ??= this.run();
  }

  /** New events are in the outbox. */
  wake(): void {
    this.wakeUp?.();
  }

  /** Whether the last produce request succeeded. */
  get healthy(): boolean {
    return this.connected && !this.outage;
  }

  /**
   * Stop relaying. Gives the current batch up to `timeoutMs` to finish; what is
   * left stays in the outbox and is delivered after the next start.
   */
  async close({ timeoutMs = 5_000 } = {}): Promise<void> {
    this.stopping = true;
    this.wake();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.loop, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    await this.producer.disconnect().catch(() => undefined);
  }

  private async run(): Promise<void> {
    let backoffMs = 100;
    let pinned: StoredEvent[] = [];
    while (!this.stopping) {
      if (pinned.length === 0) pinned = this.options.outbox.undelivered(this.options.batchSize ?? 500);
      if (pinned.length === 0) {
        await new Promise<void>((resolve) => (this.wakeUp = resolve));
        this.wakeUp = undefined;
        continue;
      }
      try {
        await this.deliver(pinned);
        this.options.outbox.markDeliveredThrough(pinned[pinned.length - 1]!.position);
        pinned = [];
        backoffMs = 100;
        if (this.outage) {
          this.logger.info({ downForMs: Date.now() - this.outage.since }, "Kafka is reachable again; delivering the outbox");
          this.outage = undefined;
        }
      } catch (error) {
        if (!this.outage) {
          this.outage = { since: Date.now() };
          this.logger.warn(
            {
              code: "KAFKA_UNAVAILABLE",
              brokers: this.options.brokers,
              undelivered: this.options.outbox.undeliveredCount(),
              reason: (error as Error).message,
            },
            "cannot deliver events to Kafka; they stay in the outbox and are retried until the broker is back",
          );
        }
        await this.sleep(backoffMs);
        backoffMs = Math.min(backoffMs * 2, 2_000);
      }
    }
  }

  private async deliver(events: StoredEvent[]): Promise<void> {
    if (!this.connected) {
      await this.producer.connect();
      this.connected = true;
    }
    if (!this.topicReady) await this.ensureTopic();
    await this.producer.send({
      topic: this.options.topic,
      acks: -1,
      messages: events.map((e) => toKafkaMessage(e.json)),
    });
  }

  // The service creates its topic with several partitions (keyed by job, so
  // order per job holds); broker auto-creation would give only its default.
  private async ensureTopic(): Promise<void> {
    const admin = this.kafka.admin();
    try {
      await admin.connect();
      await admin.createTopics({
        topics: [{ topic: this.options.topic, numPartitions: this.options.partitions ?? 3 }],
        waitForLeaders: true,
      });
      this.topicReady = true;
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wakeUp = () => {
        // New events do not end a backoff; stopping does.
        if (this.stopping) {
          clearTimeout(timer);
          resolve();
        }
      };
    });
  }

  private kafkaLog(entry: LogEntry): void {
    const { message, ...rest } = entry.log;
    // We retry failed batches ourselves from the outbox, with the same
    // idempotent producer, so bounding kafkajs's own retries is deliberate.
    if (message.startsWith("Limiting retries for the idempotent producer")) return;
    // kafkajs entries carry broker addresses and error names, never event
    // content. They go to debug: during an outage kafkajs logs every failed
    // connection, and the relay already warns once per outage and says when
    // the broker is back.
    this.logger.debug({ kafka: entry.namespace, level: entry.label, broker: rest.broker, error: rest.error }, `kafkajs: ${message}`);
  }
}
