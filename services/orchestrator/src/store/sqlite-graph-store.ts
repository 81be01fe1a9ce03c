// The GraphStore of one orchestrator: <home>/graphs.db (better-sqlite3), its
// own `orch_graph_*` tables beside the checkpoints' `graph_*` tables
// (SqliteCheckpointStore on the same handle). SQLite has one writer, so a
// publish is a plain transaction; the synchronous methods serve callers that
// cannot await (GraphRegistry's find/list/resolve/publish, until they move to
// the asynchronous ones).
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { publishSqliteVersion } from "./sqlite-versions.js";
import { SqliteCheckpointStore, type GraphDefinition } from "@oz0/graph";
import {
  graphVersionColumns,
  graphVersionFromRow,
  type GraphJobRecord,
  type GraphStore,
  type GraphVersionRecord,
  type GraphVersionRow,
  type NewGraphVersion,
  type StepJobRecord,
} from "./graph-store.js";

/** The graph database under the data directory, with the orchestrator's graph tables. */
export function openGraphDatabase(home: string): Database.Database {
  mkdirSync(home, { recursive: true });
  const db = new Database(path.join(home, "graphs.db"));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("busy_timeout = 5000");
  createGraphTables(db);
  return db;
}

function createGraphTables(db: Database.Database): void {
  db.exec(`
    CREATE TABLE IF NOT EXISTS orch_graph_versions (
      name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL,
      plugin TEXT NOT NULL, plugin_version TEXT NOT NULL, plugin_path TEXT NOT NULL,
      definition TEXT NOT NULL, published_at INTEGER NOT NULL,
      PRIMARY KEY (name, version)
    );
    CREATE TABLE IF NOT EXISTS orch_graph_jobs (
      job_id TEXT PRIMARY KEY, graph TEXT NOT NULL, version INTEGER NOT NULL,
      pinned_agents TEXT NOT NULL, created_at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS orch_graph_step_jobs (
      idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step_job_id TEXT NOT NULL, created_at INTEGER NOT NULL
    );
  `);
}

/** As SQLite stores it: the definition as JSON text, the time in milliseconds. */
type VersionRow = Omit<GraphVersionRow, "definition" | "published_at"> & { definition: string; published_at: number };

interface GraphJobRow {
  job_id: string;
  graph: string;
  version: number;
  pinned_agents: string;
  created_at: number;
}

function toVersion(r: VersionRow): GraphVersionRecord {
  return graphVersionFromRow({
    ...r,
    definition: JSON.parse(r.definition) as GraphDefinition,
    published_at: new Date(r.published_at),
  });
}

export class SqliteGraphStore implements GraphStore {
  readonly db: Database.Database;
  readonly checkpoints: SqliteCheckpointStore;

  private constructor(db: Database.Database) {
    this.db = db;
    createGraphTables(db);
    this.checkpoints = new SqliteCheckpointStore({ database: db });
  }

  /** Opens <home>/graphs.db; `close()` closes it. */
  static open(home: string): SqliteGraphStore {
    return new SqliteGraphStore(openGraphDatabase(home));
  }

  async publishVersion(version: NewGraphVersion): Promise<{ published: boolean; record: GraphVersionRecord }> {
    const { row, published } = publishSqliteVersion<VersionRow>(this.db, {
      table: "orch_graph_versions",
      row: { name: version.name, content_hash: version.contentHash, ...graphVersionColumns(version) },
    });
    return { published, record: toVersion(row) };
  }

  async getVersion(name: string, version?: number): Promise<GraphVersionRecord | undefined> {
    const row = (
      version
        ? this.db.prepare("SELECT * FROM orch_graph_versions WHERE name = ? AND version = ?").get(name, version)
        : this.db.prepare("SELECT * FROM orch_graph_versions WHERE name = ? ORDER BY version DESC LIMIT 1").get(name)
    ) as VersionRow | undefined;
    return row ? toVersion(row) : undefined;
  }

  async listLatestVersions(): Promise<GraphVersionRecord[]> {
    const rows = this.db
      .prepare(
        "SELECT v.* FROM orch_graph_versions v JOIN (SELECT name, MAX(version) AS version FROM orch_graph_versions GROUP BY name) m ON v.name = m.name AND v.version = m.version ORDER BY v.name",
      )
      .all() as VersionRow[];
    return rows.map(toVersion);
  }

  async putGraphJob(job: GraphJobRecord): Promise<void> {
    this.db
      .prepare("INSERT INTO orch_graph_jobs (job_id, graph, version, pinned_agents, created_at) VALUES (?, ?, ?, ?, ?)")
      .run(job.jobId, job.graph, job.version, JSON.stringify(job.pinnedAgents), job.createdAt.getTime());
  }

  async getGraphJob(jobId: string): Promise<GraphJobRecord | undefined> {
    const row = this.db.prepare("SELECT * FROM orch_graph_jobs WHERE job_id = ?").get(jobId) as GraphJobRow | undefined;
    if (!row) return undefined;
    return {
      jobId: row.job_id,
      graph: row.graph,
      version: row.version,
      pinnedAgents: JSON.parse(row.pinned_agents) as Record<string, number>,
      createdAt: new Date(row.created_at),
    };
  }

  async getStepJob(idempotencyKey: string): Promise<string | undefined> {
    const row = this.db
      .prepare("SELECT step_job_id FROM orch_graph_step_jobs WHERE idempotency_key = ?")
      .get(idempotencyKey) as { step_job_id: string } | undefined;
    return row?.step_job_id;
  }

  async putStepJob(record: StepJobRecord): Promise<void> {
    this.db
      .prepare(
        "INSERT OR REPLACE INTO orch_graph_step_jobs (idempotency_key, run_id, step_job_id, created_at) VALUES (?, ?, ?, ?)",
      )
      .run(record.idempotencyKey, record.runId, record.stepJobId, Date.now());
  }

  async listStepJobs(runId: string): Promise<StepJobRecord[]> {
    const rows = this.db
      .prepare(
        "SELECT idempotency_key, step_job_id FROM orch_graph_step_jobs WHERE run_id = ? ORDER BY created_at, rowid",
      )
      .all(runId) as { idempotency_key: string; step_job_id: string }[];
    return rows.map((r) => ({ idempotencyKey: r.idempotency_key, runId, stepJobId: r.step_job_id }));
  }

  async close(): Promise<void> {
    this.checkpoints.close();
    this.db.close();
  }
}
