/**
 * The durable {@link CheckpointStore} on SQLite (better-sqlite3). One row per
 * recorded step holding only that step's delta; the definition is stored once
 * per hash, not per run or step. Tables are prefixed `graph_` and migrated
 * through their own `graph_migrations` table, so the orchestrator can share its
 * database file and handle.
 */
import Database from "better-sqlite3";
import type {
  CheckpointStore,
  MergeConflict,
  RunEnd,
  RunRecord,
  RunStatus,
  StepOutcome,
  StepRecord,
  StoredRun,
} from "./checkpoint-store.js";
import type { GraphDefinition } from "./definition.js";

/** Options for {@link SqliteCheckpointStore}. */
export interface SqliteCheckpointStoreOptions {
  /** An open better-sqlite3 handle (shared; not closed by `close()`), or a file path to open. */
  database: Database.Database | string;
  /**
   * `full` (default) syncs the WAL on every step: a recorded step survives a
   * power cut. `normal` survives a process crash but not a power cut, and is faster.
   * Only applied to databases this store opens.
   */
  synchronous?: "full" | "normal";
  /**
   * Write records that arrive in the same event-loop turn in one transaction
   * (default true): parallel branches then share one sync. When false, each
   * record is its own transaction, written before `recordStep` returns.
   */
  groupCommit?: boolean;
}

/** Schema versions, applied in order, each once; append, never edit. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE graph_definitions (
     hash TEXT PRIMARY KEY,
     definition TEXT NOT NULL
   ) WITHOUT ROWID;
   CREATE TABLE graph_runs (
     id INTEGER PRIMARY KEY,
     run_id TEXT NOT NULL UNIQUE,
     graph TEXT NOT NULL,
     definition_hash TEXT NOT NULL REFERENCES graph_definitions(hash),
     definition_version TEXT,
     input TEXT NOT NULL,
     status TEXT NOT NULL,
     started_at TEXT NOT NULL,
     finished_at TEXT,
     error TEXT,
     conflicts TEXT,
     result TEXT
   );
   CREATE INDEX graph_runs_status ON graph_runs(status);
   CREATE TABLE graph_steps (
     run INTEGER NOT NULL REFERENCES graph_runs(id) ON DELETE CASCADE,
     path TEXT NOT NULL,
     node_id TEXT NOT NULL,
     iteration INTEGER NOT NULL,
     outcome TEXT NOT NULL,
     delta TEXT,
     decision TEXT,
     PRIMARY KEY (run, path)
   ) WITHOUT ROWID;`,
];

interface RunRow {
  id: number;
  run_id: string;
  graph: string;
  definition_hash: string;
  definition_version: string | null;
  definition: string;
  input: string;
  status: RunStatus;
  started_at: string;
  finished_at: string | null;
  error: string | null;
  conflicts: string | null;
  result: string | null;
}

interface StepRow {
  path: string;
  node_id: string;
  iteration: number;
  outcome: StepOutcome;
  delta: string | null;
  decision: string | null;
}

/** A {@link CheckpointStore} in SQLite, safe to share with the orchestrator's own tables. */
export class SqliteCheckpointStore implements CheckpointStore {
  /** The handle in use (for sharing or inspection). */
  public readonly db: Database.Database;
  readonly #owned: boolean;
  readonly #groupCommit: boolean;
  readonly #runIds = new Map<string, number>();
  readonly #insertStep: Database.Statement;
  readonly #selectStep: Database.Statement;
  readonly #pending: {
    run: number;
    record: StepRecord;
    resolve: (r: StepRecord) => void;
    reject: (e: unknown) => void;
  }[] = [];

  public constructor(options: SqliteCheckpointStoreOptions) {
    if (typeof options.database === "string") {
      this.db = new Database(options.database);
      this.#owned = true;
      this.db.pragma("journal_mode = WAL");
      this.db.pragma(`synchronous = ${options.synchronous === "normal" ? "NORMAL" : "FULL"}`);
      this.db.pragma("busy_timeout = 5000");
    } else {
      this.db = options.database;
      this.#owned = false;
    }
    this.#groupCommit = options.groupCommit ?? true;
    this.db.pragma("foreign_keys = ON");
    this.#migrate();
    this.#insertStep = this.db.prepare(
      `INSERT INTO graph_steps (run, path, node_id, iteration, outcome, delta, decision)
       VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run, path) DO NOTHING`,
    );
    this.#selectStep = this.db.prepare(
      "SELECT path, node_id, iteration, outcome, delta, decision FROM graph_steps WHERE run = ? AND path = ?",
    );
  }

  /** The schema version now applied. */
  public schemaVersion(): number {
    const row = this.db.prepare("SELECT MAX(version) AS v FROM graph_migrations").get() as { v: number | null };
    return row.v ?? 0;
  }

  #migrate(): void {
    this.db.exec("CREATE TABLE IF NOT EXISTS graph_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)");
    const apply = this.db.transaction(() => {
      const current = this.schemaVersion();
      MIGRATIONS.forEach((sql, i) => {
        const version = i + 1;
        if (version <= current) return;
        this.db.exec(sql);
        this.db
          .prepare("INSERT INTO graph_migrations (version, applied_at) VALUES (?, ?)")
          .run(version, new Date().toISOString());
      });
    });
    // IMMEDIATE so two processes opening one file at once do not both migrate.
    apply.immediate();
  }

  public async createRun(run: RunRecord): Promise<void> {
    this.db.transaction(() => {
      this.db
        .prepare("INSERT INTO graph_definitions (hash, definition) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING")
        .run(run.definitionHash, JSON.stringify(run.definition));
      const info = this.db
        .prepare(
          `INSERT INTO graph_runs (run_id, graph, definition_hash, definition_version, input, status, started_at)
           VALUES (?, ?, ?, ?, ?, ?, ?)`,
        )
        .run(
          run.runId,
          run.graph,
          run.definitionHash,
          run.definitionVersion ?? null,
          JSON.stringify(run.input),
          run.status,
          run.startedAt,
        );
      this.#runIds.set(run.runId, Number(info.lastInsertRowid));
    })();
  }

  public async getRun(runId: string): Promise<StoredRun | null> {
    const row = this.db
      .prepare(
        "SELECT r.*, d.definition FROM graph_runs r JOIN graph_definitions d ON d.hash = r.definition_hash WHERE r.run_id = ?",
      )
      .get(runId) as RunRow | undefined;
    return row ? toStoredRun(row) : null;
  }

  public async listRuns(filter: { status?: RunStatus } = {}): Promise<StoredRun[]> {
    const sql = "SELECT r.*, d.definition FROM graph_runs r JOIN graph_definitions d ON d.hash = r.definition_hash";
    const rows = (
      filter.status === undefined
        ? this.db.prepare(`${sql} ORDER BY r.id`).all()
        : this.db.prepare(`${sql} WHERE r.status = ? ORDER BY r.id`).all(filter.status)
    ) as RunRow[];
    return rows.map(toStoredRun);
  }

  /**
   * Group commit: records that arrive while the event loop is busy (steps of
   * parallel branches finishing together) are written in one transaction, so
   * they share one WAL sync. Each promise resolves only after its commit.
   */
  public recordStep(runId: string, record: StepRecord): Promise<StepRecord> {
    if (!this.#groupCommit) {
      try {
        return Promise.resolve(this.#writeBatch([{ run: this.#runKey(runId), record }])[0] as StepRecord);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return new Promise<StepRecord>((resolve, reject) => {
      this.#pending.push({ run: this.#runKey(runId), record, resolve, reject });
      if (this.#pending.length === 1) setImmediate(() => this.#flush());
    });
  }

  #flush(): void {
    const batch = this.#pending.splice(0);
    let results: StepRecord[];
    try {
      results = this.#writeBatch(batch.map((p) => ({ run: p.run, record: p.record })));
    } catch (e) {
      for (const p of batch) p.reject(e);
      return;
    }
    batch.forEach((p, i) => p.resolve(results[i] as StepRecord));
  }

  readonly #writeBatch = (batch: { run: number; record: StepRecord }[]): StepRecord[] =>
    this.db.transaction(() =>
      batch.map(({ run, record }) => {
        // An empty delta is stored as NULL: most control steps write nothing.
        const delta = Object.keys(record.delta).length === 0 ? null : JSON.stringify(record.delta);
        const decision = record.decision === undefined ? null : JSON.stringify(record.decision);
        const info = this.#insertStep.run(
          run,
          record.path,
          record.nodeId,
          record.iteration,
          record.outcome,
          delta,
          decision,
        );
        return info.changes === 1 ? record : toStepRecord(this.#selectStep.get(run, record.path) as StepRow);
      }),
    )();

  public async loadSteps(runId: string): Promise<StepRecord[]> {
    const rows = this.db
      .prepare("SELECT path, node_id, iteration, outcome, delta, decision FROM graph_steps WHERE run = ?")
      .all(this.#runKey(runId)) as StepRow[];
    return rows.map(toStepRecord);
  }

  public async finishRun(runId: string, end: RunEnd): Promise<void> {
    this.db
      .prepare("UPDATE graph_runs SET status = ?, finished_at = ?, error = ?, conflicts = ?, result = ? WHERE id = ?")
      .run(
        end.status,
        new Date().toISOString(),
        end.error ? JSON.stringify(end.error) : null,
        end.conflicts.length > 0 ? JSON.stringify(end.conflicts) : null,
        JSON.stringify(end.result),
        this.#runKey(runId),
      );
  }

  public async reopenRun(runId: string): Promise<void> {
    this.db
      .prepare("UPDATE graph_runs SET status = 'running', finished_at = NULL, error = NULL, result = NULL WHERE id = ?")
      .run(this.#runKey(runId));
  }

  /** Closes the database when this store opened it; a shared handle is left open. */
  public close(): void {
    if (this.#owned) this.db.close();
  }

  #runKey(runId: string): number {
    const cached = this.#runIds.get(runId);
    if (cached !== undefined) return cached;
    const row = this.db.prepare("SELECT id FROM graph_runs WHERE run_id = ?").get(runId) as { id: number } | undefined;
    if (!row) throw new Error(`run ${runId} is not in this checkpoint store; check the id`);
    this.#runIds.set(runId, row.id);
    return row.id;
  }
}

function toStoredRun(row: RunRow): StoredRun {
  const run: StoredRun = {
    runId: row.run_id,
    graph: row.graph,
    definitionHash: row.definition_hash,
    definition: JSON.parse(row.definition) as GraphDefinition,
    input: JSON.parse(row.input) as Record<string, unknown>,
    status: row.status,
    startedAt: row.started_at,
    conflicts: row.conflicts ? (JSON.parse(row.conflicts) as MergeConflict[]) : [],
  };
  if (row.definition_version !== null) run.definitionVersion = row.definition_version;
  if (row.finished_at !== null) run.finishedAt = row.finished_at;
  if (row.error !== null) run.error = JSON.parse(row.error) as { code: string; message: string };
  if (row.result !== null) run.result = JSON.parse(row.result) as Record<string, unknown>;
  return run;
}

function toStepRecord(row: StepRow): StepRecord {
  const record: StepRecord = {
    path: row.path,
    nodeId: row.node_id,
    iteration: row.iteration,
    outcome: row.outcome,
    delta: row.delta === null ? {} : (JSON.parse(row.delta) as Record<string, unknown>),
  };
  if (row.decision !== null) record.decision = JSON.parse(row.decision) as unknown;
  return record;
}
