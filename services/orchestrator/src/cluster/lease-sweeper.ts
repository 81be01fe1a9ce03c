// What each orchestrator replica runs in the background so no work is
// orphaned: take over the expired leases of replicas that died, and claim
// active jobs that have no lease at all (a replica that died between creating
// a job and leasing it). Each resource it wins is handed to `onTakeOver`,
// where the replica re-attaches the job's session, resumes the graph run from
// its checkpoint, or re-reads a pending approval. Several replicas sweep at
// once; the lease rows decide who wins each resource. A replica creating a
// job acquires the job's lease before createJob, so only a crash leaves a job
// without one.
import type pg from "pg";
import { ACTIVE_JOB_STATES } from "../store/job-store.js";
import type { Lease, LeaseKind, LeaseManager } from "./lease-manager.js";

export interface LeaseSweeperOptions {
  /** The store's pool (the `jobs` table is read to find jobs nobody leased). */
  pool: pg.Pool;
  leases: LeaseManager;
  /** Kinds to take over. Default every kind. */
  kinds?: readonly LeaseKind[];
  /** Called once for each resource this replica now owns; an error is reported, the sweep goes on. */
  onTakeOver: (lease: Lease) => Promise<void>;
  onError?: (error: unknown) => void;
  /** Most leases taken per kind and sweep, so one replica does not grab a whole dead replica's work at once. Default 50. */
  batch?: number;
}

export class LeaseSweeper {
  readonly #options: LeaseSweeperOptions;
  #timer: NodeJS.Timeout | undefined;
  #sweeping: Promise<Lease[]> | undefined;

  constructor(options: LeaseSweeperOptions) {
    this.#options = options;
  }

  /** One sweep: returns the leases this replica took. */
  async sweepOnce(): Promise<Lease[]> {
    const { leases, batch = 50 } = this.#options;
    const taken: Lease[] = [];
    for (const kind of this.#options.kinds ?? (["job", "graph_run", "approval"] as const)) {
      taken.push(...(await leases.takeOverExpired(kind, { limit: batch })));
    }
    if ((this.#options.kinds ?? ["job"]).includes("job")) {
      // Active jobs nobody ever leased: acquire() wins each for exactly one replica.
      const { rows } = await this.#options.pool.query<{ id: string }>(
        `SELECT j.id FROM jobs j WHERE j.state = ANY($1::text[])
         AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.kind = 'job' AND l.resource = j.id)
         ORDER BY j.created_at LIMIT $2`,
        [ACTIVE_JOB_STATES, batch],
      );
      for (const row of rows) {
        const lease = await leases.acquire("job", row.id);
        if (lease && !taken.some((t) => t.kind === "job" && t.resource === row.id)) taken.push(lease);
      }
    }
    for (const lease of taken) {
      try {
        await this.#options.onTakeOver(lease);
      } catch (error) {
        this.#options.onError?.(error);
      }
    }
    return taken;
  }

  /** Sweeps every `intervalMs` until `stop()`. */
  start(options: { intervalMs: number }): void {
    if (this.#timer) return;
    this.#timer = setInterval(() => {
      if (this.#sweeping) return;
      this.#sweeping = this.sweepOnce()
        .catch((error: unknown): Lease[] => {
          this.#options.onError?.(error);
          return [];
        })
        .finally(() => {
          this.#sweeping = undefined;
        });
    }, options.intervalMs);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#sweeping;
  }
}
