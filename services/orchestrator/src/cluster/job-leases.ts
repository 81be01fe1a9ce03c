// JobOwnership on leases (lease-manager.ts): the jobs this replica works on
// are the job leases it claimed or took over and has not released or lost.
// It is also what fences the store's job writes (postgres-store.ts): a job's
// lease stays here after it was lost, so whatever of the job's work is still
// in flight here has its writes refused. Writes this replica makes as a
// bystander (`asBystander`: a person's answer, a cancel) are not fenced.
// Work begun under a lease (`working`) keeps that lease as its fence, so it
// stays refused after this replica wins the job again under another.
import { AsyncLocalStorage } from "node:async_hooks";
import { isBystander, type JobOwnership } from "./job-ownership.js";
import type { Lease, LeaseFence, LeaseManager } from "./lease-manager.js";
import { failedPrecondition } from "../orchestrator-error.js";
import type { JobFences } from "../store/postgres-store.js";

/** Lost leases kept to fence late writes; an outage can lose every lease at once, so there is a bound. */
const MAX_LOST_KEPT = 10_000;

interface Working {
  lease: LeaseFence;
  lost: boolean;
}

export class JobLeases implements JobOwnership, JobFences {
  readonly #leases: LeaseManager;
  readonly #working = new Map<string, Working>();
  /** Resources whose leases were lost, oldest first (MAX_LOST_KEPT). */
  readonly #lostOrder: string[] = [];
  /** The job and lease the current async context works under (`working`). */
  readonly #tenure = new AsyncLocalStorage<{ jobId: string; lease: LeaseFence }>();

  constructor(leases: LeaseManager) {
    this.#leases = leases;
  }

  async claim(jobId: string): Promise<void> {
    // Already worked on here (or lost here): acquire would hand back that very lease, and a failed create
    // releasing it would take the lease from under the job that runs.
    if (this.#working.has(jobId))
      throw failedPrecondition(`job ${jobId} already exists at this replica; a job id is used once`);
    const lease = await this.#leases.acquire("job", jobId);
    if (!lease)
      throw failedPrecondition(
        `job ${jobId} is already leased by another orchestrator replica; submit the job again (it gets a new id)`,
      );
    this.#working.set(jobId, { lease, lost: false });
  }

  owns(jobId: string): boolean {
    const working = this.#working.get(jobId);
    return working !== undefined && !working.lost && this.#ofThisTenure(jobId, working.lease);
  }

  async release(jobId: string): Promise<void> {
    const working = this.#working.get(jobId);
    // Work of an earlier lease, ending late, gives up nothing: the lease held now is the work running under it.
    if (!working || !this.#ofThisTenure(jobId, working.lease)) return;
    this.#working.delete(jobId);
    if (!working.lost) await this.#leases.release(working.lease);
  }

  fenceFor(jobId: string): LeaseFence | undefined {
    if (isBystander()) return undefined;
    const tenure = this.#tenure.getStore();
    if (tenure?.jobId === jobId) return tenure.lease;
    return this.#working.get(jobId)?.lease;
  }

  working<T>(jobId: string, work: () => T): T {
    // Work nested in the job's own keeps the lease that began it: stale work never takes up a newer lease.
    if (this.#tenure.getStore()?.jobId === jobId) return work();
    const lease = this.#working.get(jobId)?.lease;
    return lease ? this.#tenure.run({ jobId, lease }, work) : work();
  }

  /** Whether the calling work runs under `lease` (or under no lease of the job's: a notice, a person's call). */
  #ofThisTenure(jobId: string, lease: LeaseFence): boolean {
    const tenure = this.#tenure.getStore();
    return tenure?.jobId !== jobId || tenure.lease.token === lease.token;
  }

  /** This replica took the lease over (from a dead replica, or a job nobody leased): it works on the job now. */
  adopt(lease: Lease): void {
    this.#working.set(lease.resource, { lease, lost: false });
  }

  /**
   * The lease was lost: the job is no longer this replica's, and its writes
   * stay refused, but for a bystander's. False when `lease` is not the one
   * the job is worked under (an older one): then nothing was lost.
   */
  lose(lease: Lease): boolean {
    const working = this.#working.get(lease.resource);
    if (!working || working.lease.token !== lease.token) return false;
    working.lost = true;
    this.#lostOrder.push(lease.resource);
    // Kept to fence late writes, but not forever: the oldest lost ones go first (their work long stopped).
    while (this.#lostOrder.length > MAX_LOST_KEPT) {
      const oldest = this.#lostOrder.shift()!;
      if (this.#working.get(oldest)?.lost) this.#working.delete(oldest);
    }
    return true;
  }

  /** Jobs this replica works on. */
  owned(): string[] {
    return [...this.#working].filter(([, w]) => !w.lost).map(([id]) => id);
  }
}
