// The producers' side: orchestrator, sandbox and llm-proxy hand raw events to
// this client, which batches them to the events service over gRPC and keeps
// retrying until they are accepted. A producer's own work never waits on (or
// fails because of) the events service.
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  EventsService,
  TokenCountsSchema,
  type PublishResponse,
  type TokenCounts,
  type RawEvent,
} from "@oz0/proto/oz0/events/v1/events_pb";
import { bearerInterceptor, createLogger, MAX_MESSAGE_BYTES_VARIABLE } from "@oz0/serving";
import { randomUUID } from "node:crypto";
import { connect } from "node:net";
import type { LifecycleType } from "./lifecycle-types.js";
import { createPublishSender } from "./publish-sender.js";

/** The few logger methods the publisher uses (a pino logger fits). */
export interface PublisherLogger {
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

export interface EventPublisherOptions {
  /** The events service, for example `http://127.0.0.1:7703` (OZ0_EVENTS_URL). */
  url: string;
  /** This service's credential (OZ0_SERVICE_TOKEN); the events service takes Publish only from the suite's services. */
  token?: string;
  logger?: PublisherLogger;
  /** Events per Publish call (one SQLite commit at the service). Default 1 000. */
  maxBatch?: number;
  /**
   * How long a lone event waits for company before it is sent. Default 50 ms:
   * a Publish call costs the events service about as much CPU (a gRPC call and
   * an fsync) whether it carries one event or fifty, and the sandbox and the
   * LLM proxy send an event or two per job. Nothing waits on it: `flush()` and
   * `close()` send at once, and a full batch goes without waiting.
   */
  lingerMs?: number;
  /**
   * Events held while the service is unreachable. Past it the oldest are
   * dropped, and the drop is logged with a count. Default 100 000.
   */
  maxQueued?: number;
  /** Longest wait between retries. Default 5 000 ms. */
  maxBackoffMs?: number;
}

export interface EventPublisher {
  /** Queue one or more events. Never blocks and never throws. */
  publish(events: RawEvent | RawEvent[]): void;
  /** Resolves once every event queued before the call was accepted by the service. */
  flush(): Promise<void>;
  /**
   * Flush for at most `timeoutMs` (default 5 000), then stop. Events still
   * queued are logged as dropped, with their count.
   */
  close(options?: { timeoutMs?: number }): Promise<void>;
}

/** Token counts in a raw event. */
export interface TokenCountsInit {
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
}

/** Everything a raw event may carry besides its type. */
export interface RawEventInit {
  /** Defaults to `newEventId()` (a UUID of version 7, time-ordered). Reuse an id only to say "the same event". */
  id?: string;
  /** Defaults to now. */
  time?: Date;
  /** The producer: `orchestrator`, `sandbox`, `llm-proxy`, ... */
  source?: string;
  jobId?: string;
  sessionId?: string;
  toolCallId?: string;
  operationInvocationId?: string;
  graphRunId?: string;
  graphStepId?: string;
  agentName?: string;
  agentVersion?: string;
  /** Lower-case letters and `_` only (`completed`, `timed_out`, `denied`). */
  status?: string;
  tokens?: TokenCountsInit;
  /**
   * Everything else the producer knows, sensitive content included (the
   * service keeps only what the type's allowlist allows). Values must be JSON.
   */
  attributes?: Record<string, unknown>;
  traceparent?: string;
}

/**
 * The most one Publish carries, by `rawEventBytes`: a batch stops short of it, and an event past it on its own is
 * dropped (and logged). Well below the events service's message limit (16 MiB by default, OZ0_MAX_MESSAGE_BYTES),
 * because a message over the limit is not answered ResourceExhausted there: the service's HTTP/2 session is reset
 * (NGHTTP2_ENHANCE_YOUR_CALM), which reads as the service being away, so such a batch went again for ever with
 * every event behind it (an LLM proxy's call whose model name, a harness's word, was 20 MB long).
 */
export const MAX_PUBLISH_BYTES = 4 * 1024 * 1024;

/** What the rest of an event weighs in a message besides its strings: time, token counts, field tags and lengths. */
const EVENT_FRAMING_BYTES = 128;

/** A string's UTF-8 length, at most: a UTF-16 unit is at most 3 bytes, so a short one is not measured. */
const utf8Bytes = (text: string): number => (text.length <= 64 ? text.length * 3 : Buffer.byteLength(text));

/**
 * About what an event weighs in a Publish message, never less: its strings' UTF-8 (envelope ids too, which a
 * harness can make long: a tool call's id) and a margin for the rest.
 */
export function rawEventBytes(event: RawEvent): number {
  let bytes =
    EVENT_FRAMING_BYTES +
    utf8Bytes(event.id) +
    utf8Bytes(event.type) +
    utf8Bytes(event.source) +
    utf8Bytes(event.jobId) +
    utf8Bytes(event.sessionId) +
    utf8Bytes(event.toolCallId) +
    utf8Bytes(event.operationInvocationId) +
    utf8Bytes(event.graphRunId) +
    utf8Bytes(event.graphStepId) +
    utf8Bytes(event.agentName) +
    utf8Bytes(event.agentVersion) +
    utf8Bytes(event.status) +
    utf8Bytes(event.attributesJson) +
    utf8Bytes(event.traceparent);
  // The Struct of a producer of another version: as JSON it is at least as long as encoded, near enough.
  if (event.attributes) bytes += 2 * utf8Bytes(JSON.stringify(event.attributes));
  return bytes;
}

/** The most a TokenCounts field holds (uint32). */
const MAX_TOKEN_COUNT = 0xffff_ffff;

/**
 * Token counts as the message holds them: whole numbers from 0 to 2^32 - 1, a larger count saturating there.
 * A harness reports its usage in 64 bits; a count past 32 bits made an event nobody could decode again, so the
 * orchestrator's outbox, which reads events back in batches, retried that batch, with other jobs' events in
 * it, forever.
 */
function tokenCounts(init: TokenCountsInit): TokenCounts {
  const counts = create(TokenCountsSchema, init);
  for (const field of ["inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens"] as const) {
    const n = counts[field];
    counts[field] = Number.isFinite(n) && n > 0 ? Math.min(Math.trunc(n), MAX_TOKEN_COUNT) : 0;
  }
  return counts;
}

/**
 * Build a raw event: `rawEvent("tool.called", { jobId, toolCallId, attributes: { tool_name: "read", input } })`.
 * The type is one of `LIFECYCLE_EVENTS`' keys, so the compiler refuses one the events service does not know.
 */
export function rawEvent(type: LifecycleType, init: RawEventInit = {}): RawEvent {
  // Every field of the message is set, so a literal is a complete RawEvent
  // (what create() would build, without its per-field walk).
  return {
    $typeName: "oz0.events.v1.RawEvent",
    id: init.id ?? newEventId(),
    type,
    time: timestampFromDate(init.time ?? new Date()),
    source: init.source ?? "",
    jobId: init.jobId ?? "",
    sessionId: init.sessionId ?? "",
    toolCallId: init.toolCallId ?? "",
    operationInvocationId: init.operationInvocationId ?? "",
    graphRunId: init.graphRunId ?? "",
    graphStepId: init.graphStepId ?? "",
    agentName: init.agentName ?? "",
    agentVersion: init.agentVersion ?? "",
    status: init.status ?? "",
    tokens: init.tokens ? tokenCounts(init.tokens) : undefined,
    // As JSON text rather than the Struct field: encoding a Struct (a message
    // per value) cost the producer, and decoding it the events service, more
    // than the rest of the event. JSON.stringify also takes what a producer
    // has as it is: undefined dropped, Dates as strings, NaN as null.
    attributes: undefined,
    attributesJson: init.attributes ? JSON.stringify(init.attributes) : "",
    traceparent: init.traceparent ?? "",
  };
}

/**
 * A new event id: a UUID of version 7 (RFC 9562), whose first 48 bits are
 * the time in milliseconds. The events service keeps a unique index on event
 * ids to ignore retried events; random ids (version 4) put each new entry on
 * any page of it, so a commit of 500 events rewrote a page of the index per
 * event, and the index's share of the outbox's CPU grew with the log (about
 * half of SQLite's cost per event at 100 000 events). Ids made one after
 * another sort together and the index grows at one end. 74 bits stay random.
 */
export function newEventId(now: number = Date.now()): string {
  const hex = now.toString(16).padStart(12, "0");
  // A version 4 UUID from Node's pool of random bytes, its first 48 bits the
  // time and its version digit (the 15th character) 7; the variant stays.
  const random = randomUUID();
  return `${hex.slice(0, 8)}-${hex.slice(8)}-7${random.slice(15)}`;
}

/**
 * The attributes a raw event carries, from whichever field carries them:
 * `attributes_json` (what `rawEvent()` sets) or the `attributes` Struct (a
 * producer of another version or language). A text that is not a JSON object
 * reads as none.
 */
export function rawAttributes(event: RawEvent): JsonObject {
  if (event.attributesJson === "") return event.attributes ?? {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(event.attributesJson);
  } catch {
    return {};
  }
  return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as JsonObject) : {};
}

/** Says what the events service did not take as sent: events it dropped, and events whose type it did not know (kept as an envelope only). */
export function logPublishResponse(
  logger: PublisherLogger,
  response: Pick<PublishResponse, "dropped" | "reduced">,
  count: number,
): void {
  if (response.dropped > 0) {
    logger.error(
      { code: "EVENTS_DROPPED_BY_SERVICE", dropped: response.dropped, count },
      "the events service dropped events whose id or type is not a plain identifier; build events with rawEvent()",
    );
  }
  if (response.reduced > 0) {
    logger.warn(
      { code: "EVENTS_TYPE_UNKNOWN", reduced: response.reduced, count },
      "the events service does not know the type of some events and kept only their envelope (no attributes); deploy the events service before the producers that send new types",
    );
  }
}

export function createEventPublisher(options: EventPublisherOptions): EventPublisher {
  const logger: PublisherLogger = options.logger ?? createLogger({ name: "event-publisher" });
  const maxBatch = options.maxBatch ?? 1_000;
  const lingerMs = options.lingerMs ?? 50;
  const maxQueued = options.maxQueued ?? 100_000;
  const maxBackoffMs = options.maxBackoffMs ?? 5_000;
  const client: Client<typeof EventsService> = createClient(EventsService, eventsTransport(options.url, options.token));
  // Batches go over one PublishStream while there is something to send (publish-sender.ts).
  const sender = createPublishSender(client);

  const queue: RawEvent[] = [];
  // Counts of events ever queued and ever settled (accepted or dropped), so
  // flush() can wait for "everything queued before me".
  let queued = 0;
  let settled = 0;
  const waiters: { upTo: number; resolve: () => void }[] = [];
  let sending = false;
  // The queue's first `inFlight` events are the batch being sent: an overflow
  // never drops those, or the batch's success would remove other events.
  let inFlight = 0;
  let closed = false;
  let lingerTimer: NodeJS.Timeout | undefined;
  let abort = new AbortController();

  const settle = (count: number): void => {
    settled += count;
    for (let i = waiters.length - 1; i >= 0; i--) {
      const waiter = waiters[i]!;
      if (settled >= waiter.upTo) {
        waiters.splice(i, 1);
        waiter.resolve();
      }
    }
  };

  const schedule = (): void => {
    if (sending || lingerTimer || queue.length === 0) return;
    lingerTimer = setTimeout(
      () => {
        lingerTimer = undefined;
        void drain();
      },
      queue.length >= maxBatch ? 0 : lingerMs,
    );
    lingerTimer.unref();
  };

  /** The queue's first events, at most `count` and MAX_PUBLISH_BYTES in all; none when the first is larger alone. */
  const nextBatch = (count: number): RawEvent[] => {
    let bytes = 0;
    let taken = 0;
    while (taken < count && taken < queue.length) {
      bytes += rawEventBytes(queue[taken]!);
      if (bytes > MAX_PUBLISH_BYTES) break;
      taken++;
    }
    return queue.slice(0, taken);
  };

  // One Publish in flight at a time keeps each producer's events in order.
  const drain = async (): Promise<void> => {
    if (sending) return;
    sending = true;
    let backoffMs = 100;
    // Fewer events than maxBatch while batches come out larger than the service takes in one message.
    let batchSize = maxBatch;
    try {
      while (queue.length > 0 && !closed) {
        const batch = nextBatch(batchSize);
        if (batch.length === 0) {
          // The first queued event is past MAX_PUBLISH_BYTES alone: sent, it would be refused every time.
          const [tooLarge] = queue.splice(0, 1);
          settle(1);
          logger.error(
            {
              code: "EVENTS_EVENT_TOO_LARGE",
              id: tooLarge!.id,
              type: tooLarge!.type,
              bytes: rawEventBytes(tooLarge!),
              maxBytes: MAX_PUBLISH_BYTES,
            },
            "an event is larger than one Publish carries; it is dropped (its attributes or ids are too long)",
          );
          continue;
        }
        inFlight = batch.length;
        try {
          const response = await sender.send(batch, { signal: abort.signal });
          logPublishResponse(logger, response, batch.length);
          queue.splice(0, batch.length);
          settle(batch.length);
          backoffMs = 100;
          batchSize = Math.min(maxBatch, batchSize * 2);
        } catch (error) {
          if (closed) break;
          const err = ConnectError.from(error);
          const tooLarge = err.code === Code.ResourceExhausted && err.rawMessage.includes(MAX_MESSAGE_BYTES_VARIABLE);
          if (tooLarge && batch.length > 1) {
            // Retried as it is it would be refused forever, and every event after it with it: halves go, in order.
            batchSize = Math.ceil(batch.length / 2);
            continue;
          }
          if (err.code === Code.InvalidArgument || tooLarge) {
            // Retrying cannot help a batch the service refuses; say which events went.
            queue.splice(0, batch.length);
            settle(batch.length);
            logger.error(
              {
                code: "EVENTS_BATCH_REJECTED",
                count: batch.length,
                ids: batch.map((e) => e.id),
                reason: err.rawMessage,
              },
              "the events service refused a batch of events; they are dropped (fix the producer)",
            );
            continue;
          }
          logger.warn(
            {
              code: "EVENTS_UNREACHABLE",
              url: options.url,
              queued: queue.length,
              retryInMs: backoffMs,
              reason: err.rawMessage,
            },
            "cannot publish events yet; retrying",
          );
          await sleep(backoffMs, abort.signal);
          backoffMs = Math.min(backoffMs * 2, maxBackoffMs);
        }
      }
    } finally {
      sending = false;
      inFlight = 0;
    }
    schedule();
  };

  return {
    publish(events) {
      try {
        const list = Array.isArray(events) ? events : [events];
        if (closed) {
          logger.error(
            { code: "EVENTS_PUBLISHER_CLOSED", count: list.length, ids: list.map((e) => e.id) },
            "events published after close() are dropped; publish before closing",
          );
          return;
        }
        for (const event of list) {
          if (!event.id || !event.type) {
            logger.error(
              { code: "EVENTS_INVALID_EVENT", id: event.id, type: event.type },
              "an event without an id or a type is dropped; build events with rawEvent()",
            );
            continue;
          }
          queue.push(event);
          queued++;
        }
        if (queue.length > maxQueued) {
          const dropped = queue.splice(inFlight, Math.min(queue.length - maxQueued, queue.length - inFlight));
          settle(dropped.length);
          logger.error(
            { code: "EVENTS_QUEUE_FULL", dropped: dropped.length, maxQueued, firstId: dropped[0]?.id },
            "the events service has been unreachable too long; the oldest queued events are dropped",
          );
        }
        schedule();
      } catch (error) {
        logger.error({ code: "EVENTS_PUBLISH_FAILED", err: String(error) }, "could not queue events");
      }
    },
    flush,
    async close({ timeoutMs = 5_000 } = {}) {
      if (closed) return;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        flush(),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, timeoutMs);
        }),
      ]);
      clearTimeout(timer);
      closed = true;
      if (lingerTimer) clearTimeout(lingerTimer);
      sender.close();
      abort.abort();
      abort = new AbortController();
      if (queue.length > 0) {
        logger.error(
          { code: "EVENTS_DROPPED_ON_CLOSE", dropped: queue.length, url: options.url },
          "closing with events the service never accepted; they are dropped",
        );
        const count = queue.length;
        queue.length = 0;
        settle(count);
      }
      for (const waiter of waiters.splice(0)) waiter.resolve();
    },
  };

  function flush(): Promise<void> {
    const upTo = queued;
    if (settled >= upTo) return Promise.resolve();
    if (lingerTimer) {
      clearTimeout(lingerTimer);
      lingerTimer = undefined;
    }
    void drain();
    return new Promise((resolve) => waiters.push({ upTo, resolve }));
  }
}

// Nagle's algorithm held small Publish calls back until the peer's delayed
// ACK (tens of milliseconds per call on loopback); with it off a one-event
// Publish takes about 3 ms instead of 16. Plain-HTTP URLs only: over TLS the
// default connection is kept.
export function eventsTransport(url: string, token?: string): ReturnType<typeof createGrpcTransport> {
  const parsed = new URL(url);
  const interceptors = [bearerInterceptor(token)];
  if (parsed.protocol !== "http:") return createGrpcTransport({ baseUrl: url, interceptors });
  const host = parsed.hostname.replace(/^\[(.*)\]$/, "$1");
  const port = Number(parsed.port || 80);
  return createGrpcTransport({
    baseUrl: url,
    interceptors,
    nodeOptions: { createConnection: () => connect({ host, port, noDelay: true }) },
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    timer.unref();
    signal.addEventListener("abort", done, { once: true });
    function done(): void {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
