// Lifecycle events with a transactional outbox. The job runner stores each
// event in the transaction of the job change it reports (JobAppend.lifecycle),
// so an event exists exactly when its change does, whatever happens to the
// process right after. LifecycleOutbox ships what is stored to the events
// service and removes it once accepted. A shipper claims a batch while it
// sends it and gives the claim back when the send fails; one that dies lets
// go when the claim runs out, and any replica sends the batch again. The
// events service keeps each event id once, so an event sent twice (accepted,
// then the shipper died before removing it) is still on the stream once.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import {
  createPublishSender,
  eventsTransport,
  logPublishResponse,
  rawEvent,
  rawEventBytes,
  type LifecycleType,
  type PublishSender,
} from "@oz0/events-client";
import { EventsService, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import type { Logger } from "@oz0/serving";
import type { JobStore, StoredLifecycleEvent } from "../store/job-store.js";
import type { LifecycleInit, LifecycleSink } from "../sessions/session-runner.js";

export interface LifecycleOutboxOptions {
  /** The events service (OZ0_EVENTS_URL). */
  url: string;
  /** The orchestrator's service credential: the events service takes Publish only from the suite's services. */
  token?: string | undefined;
  store: Pick<
    JobStore,
    "putLifecycleEvents" | "claimLifecycleEvents" | "deleteLifecycleEvents" | "releaseLifecycleEvents"
  >;
  logger: Logger;
  /** How often stored events are looked for without a nudge: another replica's, left by a shipper that died, or not accepted yet. Default 1 s. */
  pollMs?: number;
  /** How long a Publish call may take. Default 10 s. */
  sendTimeoutMs?: number;
  /** Events per claim and per Publish call. Default 500. */
  batch?: number;
  /**
   * How long a commit's nudge waits before shipping, so the events of
   * the jobs committing meanwhile go in the same claim, Publish call and
   * delete (issue 24: a job's five lifecycle steps were three rounds, six
   * transactions and three calls; the events service pays per call too).
   * They are stored either way: only when they reach the events service
   * moves. Default 100 ms (a tenth of the poll); 0 ships at once.
   */
  lingerMs?: number;
}

export class LifecycleOutbox implements LifecycleSink {
  readonly #o: LifecycleOutboxOptions;
  /** Batches over one PublishStream while there are some to ship (issue 24: a unary call cost the events service more than its events). */
  readonly #sender: PublishSender;
  readonly #poll: NodeJS.Timeout;
  /** A ship round runs; a nudge meanwhile asks for one more after it. */
  #shipping: Promise<void> | undefined;
  /** A nudge waits out the linger before the next round. */
  #lingering: NodeJS.Timeout | undefined;
  #again = false;
  #closed = false;
  /**
   * Events on their own (publish) waiting to be stored, in the order published. They are stored one put at a
   * time, each with every event published while the one before it was stored: puts at once went to the store
   * on connections of their own, and PostgreSQL numbered them as they happened to run, not as they were
   * published (a harness operation's steps reached the transcript and Kafka out of order).
   */
  #unstored: { event: RawEvent; type: LifecycleType; jobId: string }[] = [];
  /** The puts of `#unstored` running, so close() ships them too. */
  #storing: Promise<void> | undefined;
  /** The last round failed and said so: the next failure is not logged again. */
  #failing = false;
  /** Stops a Publish still waiting when close() gives up. */
  readonly #abort = new AbortController();
  /** Events per claim now: halved while a batch is too large for one message. */
  #batch: number;

  constructor(options: LifecycleOutboxOptions) {
    this.#o = options;
    this.#batch = options.batch ?? 500;
    this.#sender = createPublishSender(createClient(EventsService, eventsTransport(options.url, options.token)));
    this.#poll = setInterval(() => this.#looked(), options.pollMs ?? 1_000);
    this.#poll.unref();
  }

  /**
   * The raw event, its attributes bounded: what a harness or a node says (a tool call's input, an exit's error
   * code) goes in them, and one of 30 MiB was larger than the events service takes in a message. Refused every time
   * and sent again every time, oldest first, it held back every later event of every job (attacker review). Past
   * MAX_ATTRIBUTES_JSON_BYTES only the small values are kept: the public event keeps short identifiers, counts and
   * a path anyway.
   */
  event(type: LifecycleType, init: LifecycleInit): RawEvent {
    const event = rawEvent(type, { source: "orchestrator", ...init });
    // A UTF-16 unit is at most 3 bytes of UTF-8: most events are read no further than their length.
    const before =
      event.attributesJson.length * 3 <= MAX_ATTRIBUTES_JSON_BYTES ? 0 : Buffer.byteLength(event.attributesJson);
    if (before > MAX_ATTRIBUTES_JSON_BYTES) {
      const small = JSON.stringify(smallValues(init.attributes ?? {}));
      // Many small values can still be too many: then none.
      event.attributesJson = Buffer.byteLength(small) > MAX_ATTRIBUTES_JSON_BYTES ? "{}" : small;
      this.#o.logger.warn(
        { type, jobId: init.jobId, bytes: before, kept: Buffer.byteLength(event.attributesJson) },
        "a lifecycle event's attributes were larger than an event keeps; only their small values are sent",
      );
    }
    return event;
  }

  committed(): void {
    if (this.#closed || this.#lingering) return;
    if (this.#shipping) {
      this.#again = true;
      return;
    }
    const lingerMs = this.#o.lingerMs ?? 100;
    if (lingerMs <= 0) {
      this.#startShipping();
      return;
    }
    this.#lingering = setTimeout(() => {
      this.#lingering = undefined;
      if (!this.#closed) this.#startShipping();
    }, lingerMs);
    this.#lingering.unref();
  }

  /**
   * The poll's round ships at once: the linger is for commits arriving together, and a poll has none to wait
   * for (issue 24: through the linger each poll woke the process twice, a second a time while idle). A nudge's
   * linger running, or a round, covers it.
   */
  #looked(): void {
    if (this.#closed || this.#lingering) return;
    if (this.#shipping) {
      this.#again = true;
      return;
    }
    this.#startShipping();
  }

  #startShipping(): void {
    this.#shipping = this.#shipAll().finally(() => {
      this.#shipping = undefined;
      if (this.#again) {
        this.#again = false;
        // What committed while this round shipped has lingered already.
        if (!this.#closed) this.#startShipping();
      }
    });
  }

  publish(type: LifecycleType, init: LifecycleInit): void {
    if (this.#closed) {
      this.#o.logger.warn(
        { type, jobId: init.jobId },
        "a lifecycle event came after the orchestrator began stopping; it is not kept",
      );
      return;
    }
    this.#unstored.push({ event: this.event(type, init), type, jobId: init.jobId });
    this.#storing ??= this.#storeUnstored();
  }

  /** Stores what was published, a put at a time, until nothing waits. */
  async #storeUnstored(): Promise<void> {
    while (this.#unstored.length > 0) {
      const part = this.#unstored;
      this.#unstored = [];
      try {
        await this.#o.store.putLifecycleEvents(part.map((p) => p.event));
        this.committed();
      } catch (error) {
        for (const { type, jobId } of part)
          this.#o.logger.warn(
            { type, jobId, err: String(error) },
            "could not keep a lifecycle event for the events service; it is lost",
          );
      }
    }
    this.#storing = undefined;
  }

  /** Ships what is stored for at most `timeoutMs`, then stops; what is left stays stored for the next start or another replica. */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    clearInterval(this.#poll);
    await this.#storing;
    // A lingering nudge's events are shipped below, now.
    clearTimeout(this.#lingering);
    this.#lingering = undefined;
    this.#closed = true;
    const last = (async () => {
      await this.#shipping;
      await this.#shipAll();
    })();
    const timeoutMs = options.timeoutMs ?? 2_000;
    await within(last, timeoutMs);
    // A send still waiting is stopped; a store query still waiting is not waited for past a second grace.
    this.#sender.close();
    this.#abort.abort();
    await within(last, timeoutMs);
  }

  async #shipAll(): Promise<void> {
    try {
      for (;;) {
        const batch = this.#batch;
        // Claimed for longer than a send may take, so no other shipper sends them meanwhile.
        const claimed = await this.#o.store.claimLifecycleEvents({
          limit: batch,
          claimMs: 1.5 * this.#sendTimeoutMs + 1_000,
        });
        if (claimed.length === 0) break;
        await this.#ship(claimed);
        // Back toward the full batch after a batch too large was split (#send).
        this.#batch = Math.min(this.#o.batch ?? 500, this.#batch * 2);
        if (claimed.length < batch) break;
      }
      if (this.#failing) this.#o.logger.info("stored lifecycle events reach the events service again");
      this.#failing = false;
    } catch (error) {
      // The events service or the store is away: the next poll tries again.
      if (!this.#failing)
        this.#o.logger.warn(
          { code: "EVENTS_UNREACHABLE", url: this.#o.url, err: String(error) },
          "cannot ship lifecycle events yet; they stay stored and are sent again",
        );
      this.#failing = true;
    }
  }

  get #sendTimeoutMs(): number {
    return this.#o.sendTimeoutMs ?? 10_000;
  }

  /** Sends the claimed events in calls of at most MAX_SEND_BYTES; one larger alone (stored before the bound) is dropped. */
  async #ship(claimed: StoredLifecycleEvent[]): Promise<void> {
    const readable: { seq: number; event: RawEvent }[] = [];
    for (const stored of claimed) {
      if ("event" in stored) {
        readable.push(stored);
        continue;
      }
      // It can never be sent: dropped, and named, so the events claimed with it (other jobs' too) still go.
      this.#o.logger.error(
        { code: "LIFECYCLE_EVENT_UNREADABLE", seq: stored.seq, reason: stored.unreadable },
        "a stored lifecycle event does not read as an event and can never be sent; it is dropped",
      );
      await this.#o.store.deleteLifecycleEvents([stored.seq]);
    }
    // Envelope ids weigh too: counted by their attributes alone, thirty tool calls whose ids a harness made 1 MiB
    // long went as one message of 30 MiB, past the events service's limit, which ends the HTTP/2 session; read as
    // an outage, the claim went again for ever and every job's later events waited behind it.
    const sizes = readable.map((c) => rawEventBytes(c.event));
    let rest = readable;
    while (rest.length > 0) {
      const offset = readable.length - rest.length;
      let bytes = 0;
      let count = 0;
      while (count < rest.length && (count === 0 || bytes + sizes[offset + count]! <= MAX_SEND_BYTES))
        bytes += sizes[offset + count++]!;
      const part = rest.slice(0, count);
      rest = rest.slice(count);
      const seqs = part.map((c) => c.seq);
      if (bytes > MAX_SEND_BYTES) {
        // Alone and still too large: never sendable, so dropped and named, not sent again for ever ahead of the rest.
        this.#o.logger.error(
          { code: "LIFECYCLE_EVENT_TOO_LARGE", seq: seqs[0], id: part[0]!.event.id, bytes },
          "a stored lifecycle event is larger than a Publish carries and can never be sent; it is dropped",
        );
        await this.#o.store.deleteLifecycleEvents(seqs);
        continue;
      }
      try {
        await this.#send(part.map((c) => c.event));
      } catch (error) {
        // Given back at once: the next round (here or at another replica) sends them again, oldest first.
        await this.#o.store.releaseLifecycleEvents([...seqs, ...rest.map((c) => c.seq)]).catch(() => undefined);
        throw error;
      }
      await this.#o.store.deleteLifecycleEvents(seqs);
    }
  }

  async #send(events: RawEvent[]): Promise<void> {
    try {
      const response = await this.#sender.send(events, { timeoutMs: this.#sendTimeoutMs, signal: this.#abort.signal });
      logPublishResponse(this.#o.logger, response, events.length);
    } catch (error) {
      const err = ConnectError.from(error);
      if (err.code === Code.ResourceExhausted && events.length > 1) {
        // Too large for one message: the next rounds send smaller batches (the events stay stored meanwhile).
        this.#batch = Math.max(1, Math.floor(events.length / 2));
        throw error;
      }
      if (err.code !== Code.InvalidArgument && err.code !== Code.ResourceExhausted) throw error;
      // Sending again cannot help an event the service refuses, or one too large alone: say which went.
      this.#o.logger.error(
        { code: "EVENTS_BATCH_REJECTED", ids: events.map((e) => e.id), reason: err.rawMessage },
        "the events service refused lifecycle events; they are dropped",
      );
    }
  }
}

/** Attributes of a lifecycle event larger than this, as JSON, keep only their small values (LifecycleOutbox.event). */
export const MAX_ATTRIBUTES_JSON_BYTES = 64 * 1024;
/**
 * The most one Publish carries: far below the events service's 16 MiB message limit (OZ0_MAX_MESSAGE_BYTES there),
 * which it enforces on a stream by resetting it, an error that reads as an outage and was retried for ever.
 */
const MAX_SEND_BYTES = 4 * 1024 * 1024;
/** A value's JSON larger than this is left out of bounded attributes. */
const SMALL_VALUE_BYTES = 1024;

/** The attributes' values (and an object's fields, one level down) whose JSON is small; the rest left out. */
function smallValues(attributes: Record<string, unknown>): Record<string, unknown> {
  const kept: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
      const fields = Object.entries(value as Record<string, unknown>).filter(
        ([, v]) => (v === null || typeof v !== "object") && (JSON.stringify(v)?.length ?? 0) <= SMALL_VALUE_BYTES,
      );
      kept[key] = Object.fromEntries(fields);
    } else if ((JSON.stringify(value)?.length ?? 0) <= SMALL_VALUE_BYTES) kept[key] = value;
  }
  return kept;
}

/** Waits for `work` at most `ms`. */
async function within(work: Promise<void>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([work, new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
