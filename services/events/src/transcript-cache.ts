// Transcripts kept until their job's next event: every WatchJobTranscript
// stream of the orchestrators, and anyone asking GetJobTranscript again,
// would otherwise have the whole transcript rebuilt from the job's events each
// time (synchronously, on the one thread that also accepts events). A kept
// transcript is checked against the job's newest position and retention's
// mark, one indexed lookup, before it is answered.
//
// A transcript is built from the job's newest events only, and the kept ones
// hold a bounded number of events in all: a job whose harness wrote 200,000
// tool calls had its transcript rebuilt from all of them after each new
// event, 4–6 s on that thread each time (every producer's Publish waited),
// and 32 such transcripts kept over a gigabyte (attacker review).
import type { TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import type { Outbox } from "./outbox.js";
import { buildTranscript } from "./transcript.js";

/** Jobs whose transcripts are kept; the least recently asked goes first. */
export const KEPT_TRANSCRIPTS = 32;
/** A transcript's events, the newest of its job (OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS). */
export const DEFAULT_TRANSCRIPT_MAX_EVENTS = 10_000;
/** The events the kept transcripts were built from, in all: about 10 MB of transcripts per 10,000. */
const KEPT_EVENTS = 100_000;

interface Kept {
  jobHead: bigint;
  prunedThrough: bigint;
  events: number;
  transcript: TranscriptResponse;
}

export class TranscriptCache {
  readonly #kept = new Map<string, Kept>();
  readonly #outbox: Outbox;
  readonly #maxEvents: number;
  #keptEvents = 0;

  constructor(outbox: Outbox, options: { maxEvents?: number } = {}) {
    this.#outbox = outbox;
    this.#maxEvents = options.maxEvents ?? DEFAULT_TRANSCRIPT_MAX_EVENTS;
  }

  transcript(jobId: string): TranscriptResponse {
    const jobHead = this.#outbox.jobHead(jobId);
    const prunedThrough = this.#outbox.prunedThrough();
    const kept = this.#kept.get(jobId);
    if (kept) this.#forget(jobId, kept);
    if (kept && kept.jobHead === jobHead && kept.prunedThrough === prunedThrough) {
      this.#keep(jobId, kept);
      return kept.transcript;
    }
    const { events, omitted } = this.#outbox.jobTail(jobId, this.#maxEvents);
    const transcript = buildTranscript(jobId, events);
    transcript.omittedEvents = omitted;
    this.#keep(jobId, { jobHead, prunedThrough, events: events.length, transcript });
    return transcript;
  }

  #keep(jobId: string, kept: Kept): void {
    this.#kept.set(jobId, kept);
    this.#keptEvents += kept.events;
    while (this.#kept.size > KEPT_TRANSCRIPTS || (this.#keptEvents > KEPT_EVENTS && this.#kept.size > 1)) {
      const [oldest, entry] = this.#kept.entries().next().value!;
      this.#forget(oldest, entry);
    }
  }

  #forget(jobId: string, kept: Kept): void {
    this.#kept.delete(jobId);
    this.#keptEvents -= kept.events;
  }
}
