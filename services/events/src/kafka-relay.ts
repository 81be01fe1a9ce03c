// Delivers the outbox to Kafka: the oldest undelivered events first, one batch
// at a time, marking them delivered only once the broker acknowledged them
// (acks=all). While the broker is down the batch stays pinned and is retried
// as is, by the same idempotent producer, so a batch the broker did write
// before an acknowledgement was lost is not written twice; events keep their
// order per job because nothing later is sent before it. The producer itself
// runs in a worker thread (`kafka-producer-worker.ts`), so encoding a batch
// does not hold up the Publish calls this thread answers.
import { Worker } from "node:worker_threads";
import type { Logger } from "@oz0/serving";
import type { FromProducerWorker, ProducerWorkerData, ToProducerWorker } from "./kafka-producer-worker.js";
import type { KafkaFailure, KafkaSecurity } from "./kafka-security.js";
import type { Outbox, StoredEvent } from "./outbox.js";

export interface KafkaRelayOptions {
  brokers: string[];
  topic: string;
  outbox: Outbox;
  logger: Logger;
  /** Partitions when the relay creates the topic. Default 3. */
  partitions?: number;
  /** Events per produce request. Default 1 000. */
  batchSize?: number;
  clientId?: string;
  /** SASL credentials and TLS for the brokers (README, "Kafka"). Unset: PLAINTEXT. */
  security?: KafkaSecurity;
  /**
   * Undelivered events past which `caughtUp()` waits, so Publish answers at
   * the pace the relay delivers. Default one produce request (`batchSize`).
   */
  maxBacklog?: number;
  /** The longest `caughtUp()` holds a Publish back: back-pressure slows a producer, never stops one. Default 1 s. */
  maxHoldMs?: number;
}

export class KafkaRelay {
  private readonly logger: Logger;
  private readonly producer: ProducerWorker;
  private stopping = false;
  private wakeUp: (() => void) | undefined;
  private loop: Promise<void> | undefined;
  private outage: { since: number; failure: KafkaFailure } | undefined;
  /** Publish calls held back until the backlog is short again (`caughtUp`). */
  private readonly catchingUp = new Set<() => void>();

  constructor(private readonly options: KafkaRelayOptions) {
    this.logger = options.logger;
    this.producer = new ProducerWorker(
      {
        brokers: options.brokers,
        topic: options.topic,
        partitions: options.partitions ?? 3,
        clientId: options.clientId ?? "oz0-events",
        ...(options.security ? { security: options.security } : {}),
      },
      (entry) => this.kafkaLog(entry),
    );
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
    return this.producer.connected && !this.outage;
  }

  /**
   * Back-pressure for Publish, asked after its events are committed: resolves
   * once the events Kafka has not received are at most `maxBacklog` again, at
   * once when they are already, or when Kafka is unreachable or the relay
   * stops (the outbox then holds the backlog, as it is for), and after
   * `maxHoldMs` at most. Without it a producer that publishes faster than the
   * broker takes builds a backlog in the outbox through a whole run, and every
   * event's latency to Kafka includes its wait there.
   */
  caughtUp(): Promise<void> {
    if (!this.holdsBack()) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer);
        this.catchingUp.delete(done);
        resolve();
      };
      const timer = setTimeout(done, this.options.maxHoldMs ?? 1_000);
      this.catchingUp.add(done);
    });
  }

  private holdsBack(): boolean {
    const maxBacklog = this.options.maxBacklog ?? this.options.batchSize ?? 1_000;
    return !this.stopping && this.healthy && this.options.outbox.undeliveredBacklog > maxBacklog;
  }

  private releaseCaughtUp(): void {
    if (this.catchingUp.size === 0 || this.holdsBack()) return;
    for (const done of [...this.catchingUp]) done();
  }

  /**
   * Stop relaying. Gives the current batch up to `timeoutMs` to finish; what is
   * left stays in the outbox and is delivered after the next start.
   */
  async close({ timeoutMs = 5_000 } = {}): Promise<void> {
    this.stopping = true;
    this.releaseCaughtUp();
    this.wake();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.loop, new Promise((r) => (timer = setTimeout(r, timeoutMs)))]);
    clearTimeout(timer);
    await this.producer.close();
  }

  private async run(): Promise<void> {
    // Connect before the first event needs it; a broker that is down only
    // delays this (the first send connects again).
    await this.producer.connect().catch(() => undefined);
    let backoffMs = 100;
    let pinned: StoredEvent[] = [];
    while (!this.stopping) {
      if (pinned.length === 0)
        pinned = withinRequestSize(this.options.outbox.undelivered(this.options.batchSize ?? 1_000));
      if (pinned.length === 0) {
        await new Promise<void>((resolve) => (this.wakeUp = resolve));
        this.wakeUp = undefined;
        continue;
      }
      try {
        await this.producer.send(pinned.map((e) => e.json));
        this.options.outbox.markDeliveredThrough(pinned[pinned.length - 1]!.position);
        pinned = [];
        this.releaseCaughtUp();
        backoffMs = 100;
        if (this.outage) {
          this.logger.info(
            { downForMs: Date.now() - this.outage.since },
            "Kafka is reachable again; delivering the outbox",
          );
          this.outage = undefined;
        }
      } catch (error) {
        // Closing ends the batch in flight: it stays in the outbox for the next start.
        if (this.stopping) break;
        const failure = error instanceof KafkaRequestError ? error.failure : "unavailable";
        // Once per outage, and again when its cause changes (a broker back up that now refuses the credentials).
        if (this.outage?.failure !== failure) {
          const first = !this.outage;
          this.outage = { since: this.outage?.since ?? Date.now(), failure };
          // Publish calls held back go on: the outbox keeps what Kafka cannot take now.
          if (first) this.releaseCaughtUp();
          this.warnOutage(failure, (error as Error).message);
        }
        await this.sleep(backoffMs);
        backoffMs = Math.min(backoffMs * 2, 2_000);
      }
    }
  }

  private warnOutage(failure: KafkaFailure, reason: string): void {
    const sasl = this.options.security?.sasl;
    const user = sasl
      ? `the Kafka user ${sasl.username} (${sasl.mechanism})`
      : "this service's connection without credentials (OZ0_KAFKA_SASL_MECHANISM is unset)";
    const kept = "events stay in the outbox and are retried";
    const [code, message] = {
      unavailable: [
        "KAFKA_UNAVAILABLE",
        "cannot deliver events to Kafka; they stay in the outbox and are retried until the broker is back",
      ],
      authentication: [
        "KAFKA_AUTHENTICATION_FAILED",
        `Kafka refused the credentials of ${user}; ${kept}: check OZ0_KAFKA_SASL_USERNAME and the password in OZ0_KAFKA_SASL_PASSWORD_FILE, then restart the service (it reads the file at start)`,
      ],
      authorization: [
        "KAFKA_NOT_AUTHORIZED",
        `Kafka's ACLs do not let ${user} use the topic ${this.options.topic}; ${kept}: allow it Write, Describe and Create on that topic (deploy/k8s: the KafkaUser oz0-events)`,
      ],
      tls: [
        "KAFKA_TLS_FAILED",
        `the TLS connection to Kafka failed; ${kept}: set OZ0_KAFKA_TLS_CA_FILE to the CA that signed the brokers' certificates, and KAFKA_BROKERS to the names they are issued for`,
      ],
    }[failure];
    this.logger.warn(
      {
        code,
        brokers: this.options.brokers,
        undelivered: this.options.outbox.undeliveredCount(),
        reason,
      },
      message,
    );
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

  private kafkaLog(entry: Extract<FromProducerWorker, { kind: "log" }>): void {
    // We retry failed batches ourselves from the outbox, with the same
    // idempotent producer, so bounding kafkajs's own retries is deliberate.
    if (entry.message.startsWith("Limiting retries for the idempotent producer")) return;
    // kafkajs entries carry broker addresses and error names, never event
    // content. They go to debug: during an outage kafkajs logs every failed
    // connection, and the relay already warns once per outage and says when
    // the broker is back.
    this.logger.debug(
      { kafka: entry.namespace, level: entry.label, broker: entry.broker, error: entry.error },
      `kafkajs: ${entry.message}`,
    );
  }
}

// The broker refuses a record batch over its message.max.bytes (1 MiB by
// default), and one job's events all go to one partition: a batch stops well
// short of that, counting each event's JSON and about 200 bytes of key and
// headers. A single event is always sent, whatever its size.
const MAX_BATCH_BYTES = 640 * 1024;

function withinRequestSize(events: StoredEvent[]): StoredEvent[] {
  let bytes = 0;
  for (let i = 0; i < events.length; i++) {
    bytes += Buffer.byteLength(events[i]!.json) + 200;
    if (bytes > MAX_BATCH_BYTES && i > 0) return events.slice(0, i);
  }
  return events;
}

/** A request the producer thread could not complete, and why (`kafkaFailure`). */
class KafkaRequestError extends Error {
  constructor(
    message: string,
    readonly failure: KafkaFailure,
  ) {
    super(message);
    this.name = "KafkaRequestError";
  }
}

/**
 * The main thread's handle on the producer worker: one request at a time,
 * each answered once the broker acknowledged it (or failed). A worker that
 * dies fails its request and is started again for the next one; its
 * successor is a new idempotent producer, so as after a restart of the
 * service, the batch it had in flight may be written again.
 */
class ProducerWorker {
  connected = false;
  private worker: Worker | undefined;
  private nextId = 0;
  private pending: { id: number; resolve: () => void; reject: (error: Error) => void } | undefined;

  constructor(
    private readonly data: ProducerWorkerData,
    private readonly onLog: (entry: Extract<FromProducerWorker, { kind: "log" }>) => void,
  ) {}

  connect(): Promise<void> {
    return this.request({ kind: "connect", id: this.nextId++ });
  }

  send(events: string[]): Promise<void> {
    return this.request({ kind: "send", id: this.nextId++, events });
  }

  /** Disconnect the producer and end the thread (after `timeoutMs` it is ended anyway). */
  async close({ timeoutMs = 2_000 } = {}): Promise<void> {
    const worker = this.worker;
    if (!worker) return;
    const exited = new Promise((resolve) => worker.once("exit", resolve));
    worker.postMessage({ kind: "close" } satisfies ToProducerWorker);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, timeoutMs)))]);
    clearTimeout(timer);
    await worker.terminate();
  }

  private request(message: Exclude<ToProducerWorker, { kind: "close" }>): Promise<void> {
    const worker = (this.worker ??= this.spawn());
    return new Promise<void>((resolve, reject) => {
      this.pending = { id: message.id, resolve, reject };
      worker.postMessage(message);
    });
  }

  private spawn(): Worker {
    const worker = new Worker(new URL("./kafka-producer-worker.js", import.meta.url), { workerData: this.data });
    worker.on("message", (message: FromProducerWorker) => {
      if (message.kind === "log") return this.onLog(message);
      // kind "done": the answer to the one request in flight.
      this.connected = message.connected;
      const pending = this.pending;
      if (pending?.id !== message.id) return;
      this.pending = undefined;
      if (message.error === undefined) pending.resolve();
      else pending.reject(new KafkaRequestError(message.error, message.failure ?? "unavailable"));
    });
    const lost = (reason: string): void => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      this.connected = false;
      const pending = this.pending;
      this.pending = undefined;
      pending?.reject(new Error(`the Kafka producer thread stopped: ${reason}`));
    };
    worker.on("error", (error) => lost(error.message));
    worker.on("exit", (code) => lost(`exit code ${code}`));
    return worker;
  }
}
