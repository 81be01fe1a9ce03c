/**
 * Where runs and their step records live. A record holds only what one step
 * changed in the bag (its delta), keyed by the step's path, which encodes the
 * node's position, the loop iteration and the parallel branch; so storage grows
 * with the number of steps run, never with the size of the bag times steps.
 */
import type { GraphDefinition } from "./definition.js";
import type { BagDelta } from "./harness-context.js";

/** Lifecycle of a run. `running` after a crash means "resume me". */
export type RunStatus = "running" | "succeeded" | "failed" | "aborted" | "cancelled";

/** Two parallel branches wrote one key; the later-declared branch's value won. */
export interface MergeConflict {
  /** Path of the parallel node. */
  path: string;
  /** Node id of the parallel node. */
  nodeId: string;
  key: string;
  /** Branch indexes (declaration order) that wrote the key. */
  branches: number[];
  /** Index of the branch whose value is in the bag: the last one declared. */
  winner: number;
}

/** How a recorded step ended. */
export type StepOutcome = "ok" | "skipped" | "answered" | "control";

/** One checkpoint: what a step changed, recorded once. */
export interface StepRecord {
  /**
   * Unique within the run: the node's position plus loop iteration and branch,
   * e.g. `/2/3/body/0` (node 0 of the body of the loop at /2, iteration 3).
   */
  path: string;
  /** Stable node id (`agent:writer`, `step:parse-email`); not unique across iterations. */
  nodeId: string;
  /** Innermost loop iteration, 0 outside loops. */
  iteration: number;
  outcome: StepOutcome;
  /** Keys the step set and their values. */
  delta: BagDelta;
  /** For `control` records: the decision that was taken (replayed on resume). */
  decision?: unknown;
}

/** What is stored when a run starts; the run stays pinned to this definition. */
export interface RunRecord {
  runId: string;
  /** Definition name (the harness). */
  graph: string;
  /** sha256 of the canonical definition JSON. */
  definitionHash: string;
  definitionVersion?: string;
  /** The pinned definition, so a restarted orchestrator can resume without looking it up. */
  definition: GraphDefinition;
  /** The initial bag (normally `{ prompt }`). */
  input: Record<string, unknown>;
  status: RunStatus;
  /** ISO time. */
  startedAt: string;
}

/** A run with its end state, as read back. */
export interface StoredRun extends RunRecord {
  finishedAt?: string;
  error?: { code: string; message: string };
  conflicts: MergeConflict[];
  /** The bag when the run ended (absent while running). */
  result?: Record<string, unknown>;
}

/** How a run ended, written once by {@link CheckpointStore.finishRun}. */
export interface RunEnd {
  status: Exclude<RunStatus, "running">;
  error?: { code: string; message: string };
  conflicts: MergeConflict[];
  result: Record<string, unknown>;
}

/**
 * Durable storage for graph runs. Implementations must make `recordStep`
 * durable before resolving and keep the first record for a path (a second
 * writer gets the first one back), which is what makes recording exactly-once.
 */
export interface CheckpointStore {
  createRun(run: RunRecord): Promise<void>;
  getRun(runId: string): Promise<StoredRun | null>;
  /** Runs with the given status (all when omitted), oldest first. */
  listRuns(filter?: { status?: RunStatus }): Promise<StoredRun[]>;
  /** Records a step; returns the record now stored (the earlier one when the path was already recorded). */
  recordStep(runId: string, record: StepRecord): Promise<StepRecord>;
  /** Every record of a run, in any order (the engine looks them up by path). */
  loadSteps(runId: string): Promise<StepRecord[]>;
  /** Marks a run as ended. */
  finishRun(runId: string, end: RunEnd): Promise<void>;
  /** Marks an ended run as running again (a resumed failed run). */
  reopenRun(runId: string): Promise<void>;
}

/** A {@link CheckpointStore} in memory: for tests and one-process use; nothing survives the process. */
export class InMemoryCheckpointStore implements CheckpointStore {
  readonly #runs = new Map<string, StoredRun>();
  readonly #steps = new Map<string, Map<string, StepRecord>>();

  public async createRun(run: RunRecord): Promise<void> {
    if (this.#runs.has(run.runId)) throw new Error(`run ${run.runId} already exists; use a new run id`);
    this.#runs.set(run.runId, structuredClone({ ...run, conflicts: [] }));
    this.#steps.set(run.runId, new Map());
  }

  public async getRun(runId: string): Promise<StoredRun | null> {
    const run = this.#runs.get(runId);
    return run ? structuredClone(run) : null;
  }

  public async listRuns(filter: { status?: RunStatus } = {}): Promise<StoredRun[]> {
    return [...this.#runs.values()]
      .filter((r) => filter.status === undefined || r.status === filter.status)
      .map((r) => structuredClone(r));
  }

  public async recordStep(runId: string, record: StepRecord): Promise<StepRecord> {
    const steps = this.#steps.get(runId);
    if (!steps) throw new Error(`run ${runId} is not in this store`);
    const existing = steps.get(record.path);
    if (existing) return structuredClone(existing);
    steps.set(record.path, structuredClone(record));
    return record;
  }

  public async loadSteps(runId: string): Promise<StepRecord[]> {
    return structuredClone([...(this.#steps.get(runId)?.values() ?? [])]);
  }

  public async finishRun(runId: string, end: RunEnd): Promise<void> {
    const run = this.#runs.get(runId);
    if (!run) throw new Error(`run ${runId} is not in this store`);
    Object.assign(run, structuredClone(end), { finishedAt: new Date().toISOString() });
  }

  public async reopenRun(runId: string): Promise<void> {
    const run = this.#runs.get(runId);
    if (!run) throw new Error(`run ${runId} is not in this store`);
    run.status = "running";
    delete run.finishedAt;
    delete run.error;
    delete run.result;
  }
}
