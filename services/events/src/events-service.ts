// The RPC handlers, kept thin: redaction, the log and the transcript live in
// their own modules and know nothing about Connect.
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import { LIFECYCLE_EVENTS, LIFECYCLE_TYPES, isLifecycleType, type LifecycleSource } from "@oz0/events-client";
import { principalOf, type Logger } from "@oz0/serving";
import type { EventsService, PublicEvent, PublishRequest } from "@oz0/proto/oz0/events/v1/events_pb";
import type { KafkaRelay } from "./kafka-relay.js";
import { OutboxWriteError, type AppendResult, type Outbox } from "./outbox.js";
import { redactEvent } from "./redaction-policy.js";
import { traceAccepted } from "./tracing.js";
import { TranscriptCache } from "./transcript-cache.js";

/** Events per Publish call; a producer with more splits its batch. */
export const MAX_PUBLISH_BATCH = 10_000;
const WATCH_PAGE = 500;
/** Unknown types remembered so each is logged once; past this many, the rest go unlogged (PublishResponse.reduced still counts them). */
const MAX_UNKNOWN_TYPES_LOGGED = 1_000;

/** Sender and type pairs refused so each is logged once; past this many, the rest go unlogged (PublishResponse.dropped still counts them). */
const MAX_REFUSED_SENDS_LOGGED = 1_000;

/**
 * The producer a Publish comes from: the calling service, as its credential
 * proved it. The access table lets no one else publish; should a call come
 * without such a credential all the same, it is refused, not trusted.
 */
function senderOf(context: HandlerContext): LifecycleSource {
  const principal = principalOf(context);
  if (principal?.kind === "service" && (principal.id === "orchestrator" || principal.id === "llm-proxy"))
    return principal.id;
  throw new ConnectError(
    "Publish takes events from the orchestrator and llm-proxy services only, each with its own credential",
    Code.PermissionDenied,
  );
}

/** What Publish answers a call and PublishStream each batch (PublishResponse's and PublishStreamResponse's fields). */
interface BatchAnswer {
  accepted: number;
  duplicates: number;
  dropped: number;
  reduced: number;
}

export interface EventsServiceDeps {
  outbox: Outbox;
  relay?: KafkaRelay;
  logger: Logger;
  /** The Kafka topic events go to (for the spans). */
  topic?: string;
  /** Aborted when the service closes, ending every Watch stream. */
  shutdown: AbortSignal;
  /** A transcript's events, the newest of its job (OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS). Default 10,000. */
  transcriptMaxEvents?: number;
}

export function eventsService(deps: EventsServiceDeps): ServiceImpl<typeof EventsService> {
  const { outbox, relay, logger } = deps;
  const unknownTypes = new Set<string>();
  const transcripts = new TranscriptCache(
    outbox,
    deps.transcriptMaxEvents !== undefined ? { maxEvents: deps.transcriptMaxEvents } : {},
  );
  // A type outside the list (another version, another producer) keeps its
  // envelope only (the policy reduces it); the producer is told by the
  // response's count, the operator by one warning per type. It is not
  // refused: a refused batch is dropped whole by the producer, so one event
  // of a newer type would cost the known events it travels with.
  const sayUnknown = (accepted: readonly PublicEvent[]): number => {
    let reduced = 0;
    for (const event of accepted) {
      if (!event.reduced) continue;
      reduced++;
      if (unknownTypes.has(event.type) || unknownTypes.size >= MAX_UNKNOWN_TYPES_LOGGED) continue;
      unknownTypes.add(event.type);
      // The type is an identifier, and public on the stream anyway.
      logger.warn(
        { code: "EVENTS_TYPE_UNKNOWN", type: event.type, known: LIFECYCLE_TYPES },
        `events of type ${event.type} are not a lifecycle type this events service knows: they are kept with their envelope only (reduced); deploy the events service before producers that send a new type, or send one of the known types`,
      );
    }
    return reduced;
  };
  const refusedSends = new Set<string>();
  /**
   * Whether `sender` may publish an event of `type`: a known type only from a
   * service its entry in LIFECYCLE_EVENTS names (the LLM proxy's credential
   * cannot say a job completed or an approval was answered). A type this
   * service does not know is kept with its envelope only (sayUnknown),
   * whoever sends it.
   */
  const maySend = (sender: LifecycleSource, type: string): boolean => {
    if (!isLifecycleType(type)) return true;
    const senders: readonly LifecycleSource[] = LIFECYCLE_EVENTS[type].sentBy;
    if (senders.includes(sender)) return true;
    const pair = `${sender} ${type}`;
    if (!refusedSends.has(pair) && refusedSends.size < MAX_REFUSED_SENDS_LOGGED) {
      refusedSends.add(pair);
      logger.warn(
        { code: "EVENTS_SENDER_REFUSED", sender, type, sentBy: senders },
        `dropped events of type ${type} published with the ${sender} service's credential: only ${senders.join(" and ")} may send them; check which credential that producer holds`,
      );
    }
    return false;
  };
  // One batch, as Publish and each message of PublishStream take it: answered once its events are durable.
  // `sender` is the calling service: each event's source is the sender's name, whatever the event says.
  const publishBatch = async (
    request: Pick<PublishRequest, "events">,
    sender: LifecycleSource,
  ): Promise<BatchAnswer> => {
    if (request.events.length > MAX_PUBLISH_BATCH) {
      throw new ConnectError(
        `a Publish carries at most ${MAX_PUBLISH_BATCH} events (got ${request.events.length}); split the batch`,
        Code.InvalidArgument,
      );
    }
    const redacted: PublicEvent[] = [];
    let dropped = 0;
    request.events.forEach((raw, index) => {
      const outcome = redactEvent(raw);
      if (outcome.ok) {
        if (!maySend(sender, outcome.event.type)) {
          dropped++;
          return;
        }
        outcome.event.source = sender;
        redacted.push(outcome.event);
        return;
      }
      dropped++;
      // Neither the id nor the type is logged: either may be what was wrong.
      logger.warn(
        { code: outcome.code, index },
        "dropped a raw event whose id or type is not a plain identifier; build events with rawEvent()",
      );
    });
    let stored: AppendResult;
    try {
      // Resolves once durable, committed with the other calls of the moment.
      stored = await outbox.append(redacted);
    } catch (error) {
      if (!(error instanceof OutboxWriteError)) throw error;
      logger.error({ code: error.code, err: error.message }, "could not store published events in the outbox");
      // Nothing of the batch is acknowledged: the producer sends it again, and ids already stored are ignored.
      throw new ConnectError(
        "the events service could not store the events durably; send them again (producers retry by themselves)",
        Code.Unavailable,
      );
    }
    const { appended, duplicates } = stored;
    traceAccepted(appended, { ...(deps.topic ? { topic: deps.topic } : {}) });
    if (relay) {
      relay.wake();
      // Stored already; the answer waits while Kafka is behind, so a producer publishes at the pace it delivers.
      await relay.caughtUp();
    }
    return { accepted: appended.length, duplicates, dropped, reduced: sayUnknown(appended) };
  };
  return {
    publish: (request, context) => publishBatch(request, senderOf(context)),

    // A producer's batches one after another on one stream (it sends the next
    // once this one is answered): each answered in order, as Publish answers
    // it. An error ends the stream, and the producer sends the batch again.
    // The stream ends when the service closes, between batches, so a producer's
    // idle stream never holds up the close (the producer opens a new one).
    async *publishStream(requests, context) {
      if (deps.shutdown.aborted) return;
      const sender = senderOf(context);
      const batches = requests[Symbol.asyncIterator]();
      let closed: () => void = () => undefined;
      const closing = new Promise<undefined>((resolve) => (closed = () => resolve(undefined)));
      deps.shutdown.addEventListener("abort", closed, { once: true });
      try {
        for (;;) {
          const next = await Promise.race([batches.next(), closing]);
          if (next === undefined || next.done) return;
          yield await publishBatch(next.value, sender);
        }
      } finally {
        deps.shutdown.removeEventListener("abort", closed);
      }
    },

    async *watch(request, context) {
      const signal = AbortSignal.any([context.signal, deps.shutdown]);
      const jobId = request.jobId || undefined;
      // 0: from the oldest event retention kept.
      let next = request.fromPosition > 0n ? request.fromPosition : outbox.prunedThrough() + 1n;
      while (!signal.aborted) {
        const pruned = outbox.prunedThrough();
        if (next <= pruned) {
          throw new ConnectError(
            `events up to position ${pruned} were removed by retention (OZ0_EVENTS_RETENTION_HOURS), so position ${next} cannot be read; watch from ${pruned + 1n}, or from 0 for the oldest kept`,
            Code.OutOfRange,
          );
        }
        // Reading is synchronous, so nothing lands between `head` and the read:
        // a short page means everything up to `head` was sent.
        const head = outbox.headPosition;
        const page = outbox.read({ fromPosition: next, jobId, limit: WATCH_PAGE });
        for (const event of page) yield { event };
        if (page.length === WATCH_PAGE) {
          next = page[page.length - 1]!.position + 1n;
          continue;
        }
        if (head + 1n > next) next = head + 1n;
        if (request.untilCaughtUp) return;
        await outbox.waitForAfter(next - 1n, signal);
      }
    },

    transcript(request) {
      if (!request.jobId) {
        throw new ConnectError("job_id is required: name the job whose transcript you want", Code.InvalidArgument);
      }
      return transcripts.transcript(request.jobId);
    },
  };
}
