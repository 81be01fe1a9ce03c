// Live fan-out of stored job events to watchers in this process. Events are
// always stored first (with their sequence number) and published after, so
// a watcher reads the store, then follows the feed, and drops what it saw.
// With several replicas a job's events are appended at the replica that owns
// it; `followCluster` makes every replica's feed carry them too: on each
// "appended" notice for a watched job, the new events are read from the
// store and published here. The feed passes each event on once, in order,
// whichever way it arrived first.
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type { EventsAppended } from "../cluster/cluster-notifier.js";
import { notAsBystander } from "../cluster/job-ownership.js";

type Listener = (event: JobEvent) => void;
/** Hears of every job's changes that lists show (WatchJobs). */
type ChangeListener = (jobId: string, event: JobEvent) => void;

/** What lists of jobs and of approvals show: a job's state, and its calls waiting for a person. */
const LISTED: ReadonlySet<JobEvent["event"]["case"]> = new Set([
  "stateChanged",
  "permissionRequested",
  "permissionDecision",
]);

const CATCH_UP_PAGE = 500;

interface Watched {
  listeners: Set<Listener>;
  /** The last seq passed on, 0 until the first event. */
  seq: number;
  /** A store read in progress for this job, so reads do not overlap. */
  reading?: Promise<void>;
  /** A notice arrived while reading: read again after. */
  again: boolean;
}

export interface ClusterEvents {
  /** Reads a job's stored events after `afterSeq`, in order, at most `limit`. */
  listJobEvents(jobId: string, afterSeq: number, limit: number): Promise<JobEvent[]>;
  subscribeAppended(handler: (appended: EventsAppended) => void): () => void;
}

export class JobFeed {
  readonly #watched = new Map<string, Watched>();
  readonly #changes = new Set<ChangeListener>();
  #cluster: ClusterEvents | undefined;
  #onError: ((error: unknown) => void) | undefined;

  publish(jobId: string, events: readonly JobEvent[]): void {
    this.#passChanges(jobId, events);
    const watched = this.#watched.get(jobId);
    if (!watched) return;
    for (const event of events) {
      const seq = Number(event.seq);
      // Stored events carry their seq; an event without one (never stored) is passed on as is.
      if (seq > 0) {
        if (seq <= watched.seq) continue;
        watched.seq = seq;
      }
      // Outside a bystander's scope: what a listener starts is its own work (job-ownership.ts).
      for (const listener of watched.listeners) notAsBystander(() => listener(event));
    }
  }

  subscribe(jobId: string, listener: Listener): () => void {
    let watched = this.#watched.get(jobId);
    if (!watched) {
      watched = { listeners: new Set(), seq: 0, again: false };
      this.#watched.set(jobId, watched);
    }
    watched.listeners.add(listener);
    const w = watched;
    return () => {
      w.listeners.delete(listener);
      if (w.listeners.size === 0 && this.#watched.get(jobId) === w) this.#watched.delete(jobId);
    };
  }

  /**
   * Every job's changes that lists show (its state; a call starting or
   * ending to wait for a person) from now on: those appended here, and on a
   * cluster those other replicas append (read from the store on their
   * notices while anyone listens). A change may be heard twice; none is
   * replayed.
   */
  subscribeChanges(listener: ChangeListener): () => void {
    this.#changes.add(listener);
    return () => this.#changes.delete(listener);
  }

  #passChanges(jobId: string, events: readonly JobEvent[]): void {
    if (this.#changes.size === 0) return;
    for (const event of events) {
      if (!LISTED.has(event.event.case)) continue;
      for (const listener of this.#changes) notAsBystander(() => listener(jobId, event));
    }
  }

  /** Carry events other replicas append (through the cluster's notices) to this replica's watchers. */
  followCluster(cluster: ClusterEvents, options: { onError?: (error: unknown) => void } = {}): () => void {
    this.#cluster = cluster;
    this.#onError = options.onError;
    return cluster.subscribeAppended((appended) => this.#catchUp(appended));
  }

  #catchUp(appended: EventsAppended): void {
    const watched = this.#watched.get(appended.jobId);
    const cluster = this.#cluster;
    if (!watched && cluster && this.#changes.size > 0) {
      // Nobody follows this job's events here, but someone follows every job's changes.
      void cluster.listJobEvents(appended.jobId, appended.fromSeq - 1, CATCH_UP_PAGE).then(
        (events) => this.#passChanges(appended.jobId, events),
        (error: unknown) => this.#onError?.(error),
      );
      return;
    }
    if (!watched || !cluster || appended.seq <= watched.seq) return;
    if (watched.reading) {
      watched.again = true;
      return;
    }
    watched.reading = (async () => {
      do {
        watched.again = false;
        // Nothing passed on yet: the watchers read the store when they subscribed, so only this
        // append's events are new to them (they drop repeats by seq).
        let events: JobEvent[];
        do {
          events = await cluster.listJobEvents(appended.jobId, watched.seq || appended.fromSeq - 1, CATCH_UP_PAGE);
          this.publish(appended.jobId, events);
        } while (events.length === CATCH_UP_PAGE);
      } while (watched.again);
    })()
      .catch((error: unknown) => this.#onError?.(error))
      .finally(() => {
        watched.reading = undefined;
      });
  }
}
