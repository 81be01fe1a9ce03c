// Live fan-out of stored job events to watchers in this process. Events are
// always stored first (with their sequence number) and published after, so
// a watcher reads the store, then follows the feed, and drops what it saw.
import type { JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";

type Listener = (event: JobEvent) => void;

export class JobFeed {
  readonly #listeners = new Map<string, Set<Listener>>();

  publish(jobId: string, events: readonly JobEvent[]): void {
    const set = this.#listeners.get(jobId);
    if (!set) return;
    for (const event of events) for (const listener of set) listener(event);
  }

  subscribe(jobId: string, listener: Listener): () => void {
    let set = this.#listeners.get(jobId);
    if (!set) {
      set = new Set();
      this.#listeners.set(jobId, set);
    }
    set.add(listener);
    return () => {
      set.delete(listener);
      if (set.size === 0) this.#listeners.delete(jobId);
    };
  }
}
