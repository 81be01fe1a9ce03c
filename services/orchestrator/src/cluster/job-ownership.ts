// Which orchestrator replica works on a job. One orchestrator on SQLite owns
// every job (`soleOwnership`). Several replicas on PostgreSQL each own the
// jobs whose lease they hold (lease-manager.ts): a replica claims a job's
// lease before it creates the job, works on it while it holds the lease,
// gives it up when the job ends, and another replica takes it over when the
// owner dies (lease-sweeper.ts). Agent jobs and graph jobs are owned the same
// way; a graph run's step jobs each have their own lease.
import { AsyncLocalStorage } from "node:async_hooks";

export interface JobOwnership {
  /**
   * Takes the lease of a job about to be created, so no other replica works
   * on it. Throws when another replica holds it (a job id is fresh, so that
   * means a bug or a collision).
   */
  claim(jobId: string): Promise<void>;
  /**
   * True while this replica works on the job: it claimed or took over the
   * lease and has not released or lost it. Inside `working`, only while that
   * lease is the one the work began under.
   */
  owns(jobId: string): boolean;
  /** The job ended: its lease is given up, so nobody takes it over (not by work of an earlier lease: see `working`). */
  release(jobId: string): Promise<void>;
  /**
   * Runs `work`, and whatever it starts, as the job's work under the lease
   * this replica holds on it now: its writes stay fenced by that lease. Once
   * the lease is lost they are refused, even after this replica wins the job
   * again under a new lease while that work is still in flight (a replica
   * that lost a lease by its own clock often takes it back at its next
   * sweep). Without this, the old work's writes would pass the new lease's
   * fence and land beside the new work's: a message of the session handled
   * twice. Work already running under the job's lease keeps its own.
   */
  working<T>(jobId: string, work: () => T): T;
}

const bystanding = new AsyncLocalStorage<true>();

/**
 * Runs `work` as a replica writing to a job it does not run (a person's
 * answer or a cancel taken here for a job another replica runs). Its writes
 * are then not fenced by a lease this replica lost: outside such a scope,
 * every write to a job whose lease was lost is refused, so work of the job
 * still in flight here cannot land on the new owner's job.
 */
export function asBystander<T>(work: () => Promise<T>): Promise<T> {
  return bystanding.run(true, work);
}

/**
 * Runs `work` outside any bystander scope: for listeners called from a
 * bystander's write (the job feed), whose own work is the owner's and must be
 * fenced as such.
 */
export function notAsBystander<T>(work: () => T): T {
  return bystanding.exit(work);
}

/** Whether the current async context writes as a bystander (`asBystander`). */
export function isBystander(): boolean {
  return bystanding.getStore() === true;
}

/** The one-orchestrator case: it owns every job; nothing is shared. */
export const soleOwnership: JobOwnership = {
  claim: () => Promise.resolve(),
  owns: () => true,
  release: () => Promise.resolve(),
  working: (_jobId, work) => work(),
};
