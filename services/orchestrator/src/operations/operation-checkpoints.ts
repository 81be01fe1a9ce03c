// Durable records of harness-operation invocations, one per runtime tool call
// of a job, in the job store (SQLite, or PostgreSQL so the replica that takes
// a job over sees them). A record is written when the call is accepted (so a
// restarted orchestrator knows the parent still waits for it) and again when
// its result validated: the step.do checkpoint. After a crash a validated
// result is delivered as recorded, never asked again; a call without one runs
// again (exactly-once recorded, at-least-once executed).
import type { JobStore, OperationCheckpoint } from "../store/job-store.js";

export type { OperationCheckpoint } from "../store/job-store.js";

export class OperationCheckpoints {
  readonly #store: JobStore;

  constructor(options: { store: JobStore }) {
    this.#store = options.store;
  }

  get(jobId: string, callId: string): Promise<OperationCheckpoint | undefined> {
    return this.#store.getOperationCheckpoint(jobId, callId);
  }

  /** Stores a copy, so later changes to the caller's object are not half-seen. */
  put(record: OperationCheckpoint): Promise<void> {
    return this.#store.putOperationCheckpoint(structuredClone(record));
  }

  /** Records of the job, by call id. */
  all(jobId: string): Promise<OperationCheckpoint[]> {
    return this.#store.listOperationCheckpoints(jobId);
  }

  /** Records of the job whose answer has not reached the parent yet. */
  async undelivered(jobId: string): Promise<OperationCheckpoint[]> {
    return (await this.all(jobId)).filter((r) => !r.delivered);
  }
}
