// @oz0/graph's CheckpointStore on PostgreSQL (node-postgres), for graph runs
// that any orchestrator replica may resume. The tables come from the
// orchestrator's migration 6 (migrations.ts): one row per run, one
// per recorded step holding only that step's delta, and each definition once
// per hash. The contract (checkpoint-store.ts in @oz0/graph):
// - recordStep resolves only once its row is committed (autocommit, so
//   durable before the promise resolves);
// - the first record for a path wins: the INSERT does nothing on a conflict
//   and the second writer reads the first record back, in a statement of its
//   own, so it sees a row another replica committed meanwhile (a single
//   statement's snapshot could miss it).
// Writes to a run this replica works on are fenced by the run's lease, as
// the job store's are (`fences`): a replica that lost the run cannot write
// over what its new owner records.
import type {
  CheckpointStore,
  GraphDefinition,
  MergeConflict,
  RunEnd,
  RunRecord,
  RunStatus,
  StepOutcome,
  StepRecord,
  StoredRun,
} from "@oz0/graph";
import type pg from "pg";
import { fencedTransaction } from "../cluster/lease-manager.js";
import type { JobFences } from "./postgres-store.js";

interface RunRow {
  run_id: string;
  graph: string;
  definition_hash: string;
  definition_version: string | null;
  definition: GraphDefinition;
  input: Record<string, unknown>;
  status: RunStatus;
  started_at: string;
  finished_at: string | null;
  error: { code: string; message: string } | null;
  conflicts: MergeConflict[] | null;
  result: Record<string, unknown> | null;
}

interface StepRow {
  path: string;
  node_id: string;
  iteration: number;
  outcome: StepOutcome;
  delta: Record<string, unknown>;
  /** As text: a recorded JSON null and no decision at all are different things. */
  decision: string | null;
}

const RUN_COLUMNS =
  "r.run_id, r.graph, r.definition_hash, r.definition_version, d.definition, r.input, r.status, r.started_at, r.finished_at, r.error, r.conflicts, r.result";
const STEP_COLUMNS = "path, node_id, iteration, outcome, delta, decision::text AS decision";

/** foreign_key_violation: the step's run is not in the store. */
const FOREIGN_KEY_VIOLATION = "23503";

function toStoredRun(row: RunRow): StoredRun {
  const run: StoredRun = {
    runId: row.run_id,
    graph: row.graph,
    definitionHash: row.definition_hash,
    definition: row.definition,
    input: row.input,
    status: row.status,
    startedAt: row.started_at,
    conflicts: row.conflicts ?? [],
  };
  if (row.definition_version !== null) run.definitionVersion = row.definition_version;
  if (row.finished_at !== null) run.finishedAt = row.finished_at;
  if (row.error !== null) run.error = row.error;
  if (row.result !== null) run.result = row.result;
  return run;
}

function toStepRecord(row: StepRow): StepRecord {
  const record: StepRecord = {
    path: row.path,
    nodeId: row.node_id,
    iteration: row.iteration,
    outcome: row.outcome,
    delta: row.delta,
  };
  if (row.decision !== null) record.decision = JSON.parse(row.decision) as unknown;
  return record;
}

function notInStore(runId: string): Error {
  return new Error(`run ${runId} is not in this checkpoint store; check the id`);
}

export class PostgresCheckpointStore implements CheckpointStore {
  readonly #pool: pg.Pool;
  readonly #fences: JobFences | undefined;

  /**
   * On a pool whose schema has the orchestrator's migrations applied
   * (PostgresGraphStore.open does that). `fences`: the lease each run's
   * writes are made under (a run's id is its graph job's).
   */
  constructor(pool: pg.Pool, fences?: JobFences) {
    this.#pool = pool;
    this.#fences = fences;
  }

  /** A write to `runId`, refused (LeaseLostError) once this replica no longer holds the run's lease. */
  write<T>(runId: string, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return fencedTransaction(this.#pool, this.#fences?.fenceFor(runId), work);
  }

  async createRun(run: RunRecord): Promise<void> {
    await this.write(run.runId, async (client) => {
      await client.query(
        "INSERT INTO graph_definitions (hash, definition) VALUES ($1, $2) ON CONFLICT (hash) DO NOTHING",
        [run.definitionHash, JSON.stringify(run.definition)],
      );
      await client.query(
        `INSERT INTO graph_runs (run_id, graph, definition_hash, definition_version, input, status, started_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [
          run.runId,
          run.graph,
          run.definitionHash,
          run.definitionVersion ?? null,
          JSON.stringify(run.input),
          run.status,
          run.startedAt,
        ],
      );
    });
  }

  async getRun(runId: string): Promise<StoredRun | null> {
    const { rows } = await this.#pool.query<RunRow>(
      `SELECT ${RUN_COLUMNS} FROM graph_runs r JOIN graph_definitions d ON d.hash = r.definition_hash WHERE r.run_id = $1`,
      [runId],
    );
    return rows[0] ? toStoredRun(rows[0]) : null;
  }

  async listRuns(filter: { status?: RunStatus } = {}): Promise<StoredRun[]> {
    const from = `SELECT ${RUN_COLUMNS} FROM graph_runs r JOIN graph_definitions d ON d.hash = r.definition_hash`;
    const { rows } =
      filter.status === undefined
        ? await this.#pool.query<RunRow>(`${from} ORDER BY r.ord`)
        : await this.#pool.query<RunRow>(`${from} WHERE r.status = $1 ORDER BY r.ord`, [filter.status]);
    return rows.map(toStoredRun);
  }

  async recordStep(runId: string, record: StepRecord): Promise<StepRecord> {
    let inserted: pg.QueryResult;
    try {
      inserted = await this.write(runId, (client) =>
        client.query(
          `INSERT INTO graph_steps (run_id, path, node_id, iteration, outcome, delta, decision) VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (run_id, path) DO NOTHING`,
          [
            runId,
            record.path,
            record.nodeId,
            record.iteration,
            record.outcome,
            JSON.stringify(record.delta),
            record.decision === undefined ? null : JSON.stringify(record.decision),
          ],
        ),
      );
    } catch (error) {
      if ((error as { code?: string }).code === FOREIGN_KEY_VIOLATION) throw notInStore(runId);
      throw error;
    }
    if (inserted.rowCount === 1) return record;
    // Another writer recorded this path first: its record is the one that counts.
    const { rows } = await this.#pool.query<StepRow>(
      `SELECT ${STEP_COLUMNS} FROM graph_steps WHERE run_id = $1 AND path = $2`,
      [runId, record.path],
    );
    if (!rows[0])
      throw new Error(
        `step ${record.path} of run ${runId} was neither recorded nor found; was the run deleted meanwhile?`,
      );
    return toStepRecord(rows[0]);
  }

  async loadSteps(runId: string): Promise<StepRecord[]> {
    const { rows } = await this.#pool.query<StepRow>(`SELECT ${STEP_COLUMNS} FROM graph_steps WHERE run_id = $1`, [
      runId,
    ]);
    return rows.map(toStepRecord);
  }

  async finishRun(runId: string, end: RunEnd): Promise<void> {
    const { rowCount } = await this.write(runId, (client) =>
      client.query(
        "UPDATE graph_runs SET status = $2, finished_at = $3, error = $4, conflicts = $5, result = $6 WHERE run_id = $1",
        [
          runId,
          end.status,
          new Date().toISOString(),
          end.error ? JSON.stringify(end.error) : null,
          end.conflicts.length > 0 ? JSON.stringify(end.conflicts) : null,
          JSON.stringify(end.result),
        ],
      ),
    );
    if (rowCount === 0) throw notInStore(runId);
  }

  async reopenRun(runId: string): Promise<void> {
    const { rowCount } = await this.write(runId, (client) =>
      client.query(
        "UPDATE graph_runs SET status = 'running', finished_at = NULL, error = NULL, result = NULL WHERE run_id = $1",
        [runId],
      ),
    );
    if (rowCount === 0) throw notInStore(runId);
  }
}
