// What WatchJobTranscript streams share: one follower per job, however many
// streams watch it. The follower holds the job's one events-service Watch and
// reads the transcript once per change (a burst of changes that lands while a
// read is in flight costs one more read, not one each); every stream on the
// job is then sent that one transcript. So N watchers of a job cost the events
// service what one does, and a viewer who opens many streams cannot take
// transcripts down for everyone (each stream opening its own Watch and its own
// reads once did, over the orchestrator's one connection to the events
// service). The follower starts with the first stream on its job and stops
// with the last.
//
// Reads of one job come at most once a second: the events service builds a
// transcript on the thread that takes every Publish (up to 10,000 events a
// read), and a job writing events without a pause had it rebuilt after each.
import { setTimeout as sleep } from "node:timers/promises";
import { equals } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { TranscriptResponseSchema, type TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";
import { Doorbell } from "../doorbell.js";
import type { JobTranscripts } from "./job-transcripts.js";

/** The least time between two reads of one job's transcript. */
export const TRANSCRIPT_READ_INTERVAL_MS = 1_000;

/** One job's follower: the transcript it read last, and who waits for the next. */
class JobFollower {
  /** Counts the transcripts read that differed from the one before: a stream has sent every one up to the number it holds. */
  version = 0;
  latest: TranscriptResponse | undefined;
  failure: { error: unknown } | undefined;
  /** The streams on this job, each ringing its own doorbell. */
  readonly watchers = new Set<() => void>();
  readonly stop = new AbortController();

  constructor(
    private readonly transcripts: JobTranscripts,
    readonly jobId: string,
  ) {}

  /** Follows the job until stopped or failed; never rejects (a failure is kept for the streams to end with). */
  async run(onEnd: () => void): Promise<void> {
    const { signal } = this.stop;
    const bell = new Doorbell(signal);
    let changed = false;
    let ended: { error: unknown } | undefined;
    let lastRead = Number.NEGATIVE_INFINITY;
    const following = (async () => {
      try {
        for await (const _ of this.transcripts.changes(this.jobId, signal)) {
          changed = true;
          bell.ring();
        }
        // The events service ended its stream (it is shutting down): the streams end, and their callers watch again.
        if (!signal.aborted)
          throw new ConnectError(
            "the events service stopped sending the job's events; watch again (the first answer is the whole transcript)",
            Code.Unavailable,
          );
      } catch (error) {
        ended = { error };
        bell.ring();
      }
    })();
    try {
      while (!signal.aborted) {
        await bell.wait(() => changed || ended !== undefined);
        // What changed before a failure is read (and sent) first.
        if (!changed) {
          if (ended) throw ended.error;
          continue;
        }
        // Changes that land during the wait are in the read that follows it.
        const wait = lastRead + TRANSCRIPT_READ_INTERVAL_MS - performance.now();
        if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => undefined);
        if (signal.aborted) break;
        changed = false;
        lastRead = performance.now();
        const transcript = await this.transcripts.transcript(this.jobId);
        // An event that changed nothing a transcript shows is not sent: compared once here, not once per stream.
        if (this.latest && equals(TranscriptResponseSchema, this.latest, transcript)) continue;
        this.latest = transcript;
        this.version++;
        for (const ring of this.watchers) ring();
      }
    } catch (error) {
      if (!signal.aborted) this.failure = { error };
    } finally {
      this.stop.abort();
      bell.close();
      await following;
      // A stream that comes after this gets a new follower; the ones here end with the failure, if any.
      onEnd();
      for (const ring of this.watchers) ring();
    }
  }
}

export class TranscriptFollowers {
  readonly #followers = new Map<string, JobFollower>();

  constructor(private readonly transcripts: JobTranscripts) {}

  /** How many jobs are followed now (one events-service Watch each). */
  get followed(): number {
    return this.#followers.size;
  }

  /**
   * The job's transcript once its follower has caught up (at once when it
   * already has), then each different transcript after that, until `signal`
   * aborts. A stream that falls behind skips to the newest transcript: each
   * answer is the whole transcript, so none is lost by it. Throws what ended
   * the job's follower (the events service failing, or ending its stream).
   */
  async *watch(jobId: string, signal: AbortSignal): AsyncGenerator<TranscriptResponse> {
    const follower = this.#followerOf(jobId);
    const bell = new Doorbell(signal);
    const ring = (): void => bell.ring();
    follower.watchers.add(ring);
    let sent = 0;
    try {
      while (!signal.aborted) {
        await bell.wait(() => follower.version > sent || follower.stop.signal.aborted);
        if (signal.aborted) return;
        if (follower.version > sent) {
          sent = follower.version;
          yield follower.latest!;
          continue;
        }
        if (follower.failure) throw follower.failure.error;
        // The follower stopped without a failure only once its last stream left; this one is still here, so never.
        throw new ConnectError("the job's transcript stopped being followed; watch again", Code.Unavailable);
      }
    } finally {
      bell.close();
      follower.watchers.delete(ring);
      // The last stream on the job: its Watch of the events service ends too.
      if (follower.watchers.size === 0) follower.stop.abort();
    }
  }

  #followerOf(jobId: string): JobFollower {
    const running = this.#followers.get(jobId);
    // One whose last stream just left is stopping: a new stream starts another.
    if (running && !running.stop.signal.aborted) return running;
    const follower = new JobFollower(this.transcripts, jobId);
    this.#followers.set(jobId, follower);
    void follower.run(() => {
      if (this.#followers.get(jobId) === follower) this.#followers.delete(jobId);
    });
    return follower;
  }
}
