// Starts the events service: the outbox, the Kafka relay (when brokers are
// configured) and the RPC server. Tests and the embedded stack call this very
// function; main.ts only reads the environment.
import { EventsService } from "@oz0/proto/oz0/events/v1/events_pb";
import { Authenticator, createLogger, registration, serve, type AuthSettings, type Logger } from "@oz0/serving";
import { eventsService } from "./events-service.js";
import { KafkaRelay } from "./kafka-relay.js";
import { describeKafkaSecurity, type KafkaSecurity } from "./kafka-security.js";
import { Outbox } from "./outbox.js";
import { publishTraces } from "./tracing.js";

export const DEFAULT_TOPIC = "oz0.lifecycle.v1";
export const DEFAULT_RETENTION_MS = 7 * 24 * 3_600_000;

export interface EventsConfig {
  /** Port to listen on; 0 picks a free one. Default 0. */
  port?: number;
  /** Default 127.0.0.1. */
  host?: string;
  /** Folder for the durable log (OZ0_EVENTS_DATA). Undefined keeps it in memory: tests only. */
  dataDir?: string;
  /** Kafka bootstrap brokers (KAFKA_BROKERS). Empty: the local log only (the embedded default). */
  kafkaBrokers?: string[];
  /** Default `oz0.lifecycle.v1` (OZ0_KAFKA_TOPIC). */
  topic?: string;
  /**
   * SASL credentials and TLS for the brokers (OZ0_KAFKA_SASL_*, OZ0_KAFKA_TLS*).
   * Unset: PLAINTEXT, as before.
   */
  kafkaSecurity?: KafkaSecurity;
  /** Partitions when the service creates the topic. Default 3. */
  partitions?: number;
  /**
   * Largest request message, a batch of events, in bytes (OZ0_MAX_MESSAGE_BYTES).
   * Default 16 MiB: a producer sends up to 1 000 events a batch, and the
   * publisher splits a batch the service refuses for its size.
   */
  maxMessageBytes?: number;
  /**
   * How long the local log keeps an event (OZ0_EVENTS_RETENTION_HOURS).
   * Default 7 days; 0 keeps every event. An event Kafka has not received yet
   * is kept however old it is.
   */
  retentionMs?: number;
  /** How often retention runs. Default a tenth of the retention, between 1 minute and 1 hour. */
  pruneIntervalMs?: number;
  /**
   * A transcript is built from its job's newest this many events (OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS); the
   * response counts the rest in omitted_events. Default 10,000.
   */
  transcriptMaxEvents?: number;
  /** The clock retention goes by. Default Date.now; tests move it. */
  now?: () => number;
  logger?: Logger;
  /**
   * Who may call: producers by their service credentials (Publish), people by
   * theirs (Watch, Transcript). Without it nobody can, but health answers.
   */
  auth?: AuthSettings;
}

export interface RunningEvents {
  /** `http://host:port`: give it to producers as OZ0_EVENTS_URL. */
  readonly url: string;
  readonly port: number;
  /** Stop serving, end Watch streams, let the relay finish its batch, close the log. */
  close(): Promise<void>;
}

export async function startEvents(config: EventsConfig = {}): Promise<RunningEvents> {
  const logger = config.logger ?? createLogger({ name: "events" });
  const now = config.now ?? Date.now;
  const brokers = config.kafkaBrokers?.filter(Boolean) ?? [];
  const outbox = new Outbox({ dataDir: config.dataDir, now, relayTail: brokers.length > 0 });
  const topic = config.topic || DEFAULT_TOPIC;
  const security = config.kafkaSecurity;
  const relay =
    brokers.length > 0
      ? new KafkaRelay({
          brokers,
          topic,
          outbox,
          logger,
          partitions: config.partitions,
          ...(security ? { security } : {}),
        })
      : undefined;
  const shutdown = new AbortController();
  let server;
  try {
    server = await serve({
      name: "events",
      host: config.host,
      port: config.port ?? 0,
      logger,
      maxMessageBytes: config.maxMessageBytes ?? 16 * 1024 * 1024,
      auth: new Authenticator(config.auth ?? {}),
      untracedRpcs: publishTraces,
      services: [
        registration(
          EventsService,
          eventsService({
            outbox,
            relay,
            logger,
            shutdown: shutdown.signal,
            ...(relay ? { topic } : {}),
            ...(config.transcriptMaxEvents !== undefined ? { transcriptMaxEvents: config.transcriptMaxEvents } : {}),
          }),
        ),
      ],
    });
  } catch (error) {
    await outbox.close();
    throw error;
  }
  // Started after listening, and never awaited: a broker that is down must
  // not keep the service from accepting events into its outbox.
  relay?.start();
  const retentionMs = config.retentionMs ?? DEFAULT_RETENTION_MS;
  let pruneTimer: NodeJS.Timeout | undefined;
  // The run in progress, which close() waits for before it closes the log.
  let pruning: Promise<void> | undefined;
  if (retentionMs > 0) {
    // A step at a time, yielding between steps: a large backlog never holds Publish calls up for long.
    const pruneAll = async (): Promise<void> => {
      let removed = 0;
      try {
        const options = { acceptedBefore: now() - retentionMs, keepUndelivered: relay !== undefined };
        while (!shutdown.signal.aborted) {
          const step = outbox.pruneStep(options);
          if (step === 0) break;
          removed += step;
          await new Promise((resolve) => setImmediate(resolve));
        }
        if (removed > 0)
          logger.info(
            { removed, retentionHours: retentionMs / 3_600_000, prunedThrough: String(outbox.prunedThrough()) },
            "removed events older than the retention period from the local log",
          );
      } catch (error) {
        logger.error(
          { err: error },
          "could not remove old events from the local log; trying again at the next interval",
        );
      }
    };
    const prune = (): void => {
      if (pruning || shutdown.signal.aborted) return;
      pruning = pruneAll().finally(() => (pruning = undefined));
    };
    prune();
    pruneTimer = setInterval(prune, config.pruneIntervalMs ?? Math.min(3_600_000, Math.max(60_000, retentionMs / 10)));
    pruneTimer.unref();
  }
  if (relay && security?.sasl?.mechanism === "PLAIN" && !security.tls)
    logger.warn(
      { code: "KAFKA_PLAIN_WITHOUT_TLS" },
      "SASL PLAIN sends the Kafka password as it is over a connection without TLS: set OZ0_KAFKA_TLS=true (or OZ0_KAFKA_TLS_CA_FILE), or use SCRAM-SHA-512",
    );
  logger.info(
    {
      kafka: brokers.length > 0 ? { brokers, topic, ...describeKafkaSecurity(security) } : "off (local log only)",
      dataDir: config.dataDir ?? "memory",
    },
    "events ready",
  );

  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    port: server.port,
    close() {
      closing ??= (async () => {
        shutdown.abort();
        clearInterval(pruneTimer);
        // It stops at its next step; the log must stay open until it has.
        await pruning;
        await server.close({ graceMs: 1_000 });
        await relay?.close();
        await outbox.close();
      })();
      return closing;
    },
  };
}
