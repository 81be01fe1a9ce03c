// The GraphStore of orchestrator replicas sharing one PostgreSQL database:
// graph versions, graph jobs, step jobs and checkpoints (postgres-checkpoint-
// store.ts) in the job store's schema, on the job store's pool, so the
// replica that takes a dead replica's graph job over finds everything it
// needs to resume it. Tables: migration 6 in postgres-migrations.ts.
import type pg from "pg";
import {
  graphVersionColumns,
  graphVersionFromRow as toVersion,
  type GraphJobRecord,
  type GraphStore,
  type GraphVersionRecord,
  type GraphVersionRow as VersionRow,
  type NewGraphVersion,
  type StepJobRecord,
} from "./graph-store.js";
import { PostgresCheckpointStore } from "./postgres-checkpoint-store.js";
import { migrateOrchestrator } from "./postgres-migrations.js";
import type { JobFences } from "./postgres-store.js";
import { publishPostgresVersion } from "./postgres-versions.js";

interface GraphJobRow {
  job_id: string;
  graph: string;
  version: number;
  pinned_agents: Record<string, number>;
  created_at: Date;
}

export class PostgresGraphStore implements GraphStore {
  readonly checkpoints: PostgresCheckpointStore;
  readonly #pool: pg.Pool;

  private constructor(pool: pg.Pool, fences?: JobFences) {
    this.#pool = pool;
    this.checkpoints = new PostgresCheckpointStore(pool, fences);
  }

  /**
   * On the job store's pool (left open by `close()`). Applies the
   * orchestrator's migrations, a no-op when the job store already did, on
   * `schema` or else the schema the pool's connections resolve tables in.
   * `fences`: the leases a run's checkpoints and step jobs are written under.
   */
  static async open(options: { pool: pg.Pool; schema?: string; fences?: JobFences }): Promise<PostgresGraphStore> {
    let schema = options.schema;
    if (!schema) {
      const { rows } = await options.pool.query<{ schema: string | null }>("SELECT current_schema() AS schema");
      schema = rows[0]?.schema ?? undefined;
      if (!schema)
        throw new Error(
          "the pool's search_path names no existing schema; open the job store first (it creates the schema) or pass schema",
        );
    }
    await migrateOrchestrator(options.pool, schema);
    return new PostgresGraphStore(options.pool, options.fences);
  }

  async publishVersion(version: NewGraphVersion): Promise<{ published: boolean; record: GraphVersionRecord }> {
    const { row, published } = await publishPostgresVersion<VersionRow>(this.#pool, {
      table: "graph_versions",
      name: version.name,
      contentHash: version.contentHash,
      columns: graphVersionColumns(version),
    });
    return { published, record: toVersion(row) };
  }

  async getVersion(name: string, version?: number): Promise<GraphVersionRecord | undefined> {
    const { rows } = version
      ? await this.#pool.query<VersionRow>("SELECT * FROM graph_versions WHERE name = $1 AND version = $2", [
          name,
          version,
        ])
      : await this.#pool.query<VersionRow>(
          "SELECT * FROM graph_versions WHERE name = $1 ORDER BY version DESC LIMIT 1",
          [name],
        );
    return rows[0] ? toVersion(rows[0]) : undefined;
  }

  async listLatestVersions(): Promise<GraphVersionRecord[]> {
    const { rows } = await this.#pool.query<VersionRow>(
      "SELECT DISTINCT ON (name) * FROM graph_versions ORDER BY name, version DESC",
    );
    return rows.map(toVersion);
  }

  async putGraphJob(job: GraphJobRecord): Promise<void> {
    await this.#pool.query(
      "INSERT INTO graph_jobs (job_id, graph, version, pinned_agents, created_at) VALUES ($1, $2, $3, $4, $5)",
      [job.jobId, job.graph, job.version, JSON.stringify(job.pinnedAgents), job.createdAt],
    );
  }

  async getGraphJob(jobId: string): Promise<GraphJobRecord | undefined> {
    const { rows } = await this.#pool.query<GraphJobRow>("SELECT * FROM graph_jobs WHERE job_id = $1", [jobId]);
    const row = rows[0];
    return row
      ? {
          jobId: row.job_id,
          graph: row.graph,
          version: row.version,
          pinnedAgents: row.pinned_agents,
          createdAt: row.created_at,
        }
      : undefined;
  }

  async getStepJob(idempotencyKey: string): Promise<string | undefined> {
    const { rows } = await this.#pool.query<{ step_job_id: string }>(
      "SELECT step_job_id FROM graph_step_jobs WHERE idempotency_key = $1",
      [idempotencyKey],
    );
    return rows[0]?.step_job_id;
  }

  async putStepJob(record: StepJobRecord): Promise<void> {
    // Under the run's lease: a replica that lost the run cannot replace the job its new owner recorded.
    await this.checkpoints.write(record.runId, (client) =>
      client.query(
        `INSERT INTO graph_step_jobs (idempotency_key, run_id, step_job_id, created_at) VALUES ($1, $2, $3, now())
         ON CONFLICT (idempotency_key) DO UPDATE SET run_id = excluded.run_id, step_job_id = excluded.step_job_id, created_at = excluded.created_at`,
        [record.idempotencyKey, record.runId, record.stepJobId],
      ),
    );
  }

  async listStepJobs(runId: string): Promise<StepJobRecord[]> {
    const { rows } = await this.#pool.query<{ idempotency_key: string; step_job_id: string }>(
      "SELECT idempotency_key, step_job_id FROM graph_step_jobs WHERE run_id = $1 ORDER BY created_at, idempotency_key",
      [runId],
    );
    return rows.map((r) => ({ idempotencyKey: r.idempotency_key, runId, stepJobId: r.step_job_id }));
  }

  /** The pool is the job store's: it closes it. */
  async close(): Promise<void> {
    await Promise.resolve();
  }
}
