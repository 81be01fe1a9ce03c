// Transcripts kept until their job's next event: every WatchJobTranscript
// stream of the orchestrators, and anyone asking GetJobTranscript again,
// would otherwise have the whole transcript rebuilt from the job's events each
// time (synchronously, on the one thread that also accepts events). A kept
// transcript is checked against the job's newest position and retention's
// mark, one indexed lookup, before it is answered.
import type { TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import type { Outbox } from "./outbox.js";
import { buildTranscript } from "./transcript.js";

/** Jobs whose transcripts are kept; the least recently asked goes first. A transcript is a few MB at most. */
export const KEPT_TRANSCRIPTS = 32;

interface Kept {
  jobHead: bigint;
  prunedThrough: bigint;
  transcript: TranscriptResponse;
}

export class TranscriptCache {
  readonly #kept = new Map<string, Kept>();
  constructor(private readonly outbox: Outbox) {}

  transcript(jobId: string): TranscriptResponse {
    const jobHead = this.outbox.jobHead(jobId);
    const prunedThrough = this.outbox.prunedThrough();
    const kept = this.#kept.get(jobId);
    this.#kept.delete(jobId);
    if (kept && kept.jobHead === jobHead && kept.prunedThrough === prunedThrough) {
      this.#kept.set(jobId, kept);
      return kept.transcript;
    }
    const transcript = buildTranscript(jobId, this.outbox.job(jobId));
    this.#kept.set(jobId, { jobHead, prunedThrough, transcript });
    if (this.#kept.size > KEPT_TRANSCRIPTS) this.#kept.delete(this.#kept.keys().next().value!);
    return transcript;
  }
}
