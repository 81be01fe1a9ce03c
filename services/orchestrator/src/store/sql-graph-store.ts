// The GraphStore's queries, once for SQLite and PostgreSQL (Kysely,
// sql-database.ts): published graph versions, graph jobs and the job each
// step runs as. The runs' checkpoints are the engine's own CheckpointStore
// (@oz0/graph's SqliteCheckpointStore in graphs.db, postgres-checkpoint-
// store.ts in the replicas' schema). On PostgreSQL (postgres-graph-store.ts)
// a run's step jobs are written under the run's lease and publishers of one
// name take an advisory lock.
import type { CheckpointStore } from "@oz0/graph";
import type { GraphJobRecord, GraphStore, GraphVersionRecord, NewGraphVersion, StepJobRecord } from "./graph-store.js";
import type { Db, SqlEngine } from "./sql-database.js";
import type { Trx } from "./sql-job-store.js";
import { toGraphJob, toGraphVersion } from "./sql-rows.js";
import { getVersionRow, latestVersionRows, publishVersion } from "./versions.js";

export abstract class SqlGraphStore implements GraphStore {
  abstract readonly checkpoints: CheckpointStore;
  protected readonly db: Db;
  protected readonly engine: SqlEngine;

  constructor(db: Db, engine: SqlEngine) {
    this.db = db;
    this.engine = engine;
  }

  /** First in a write to a run's records (its step jobs): its lease, on PostgreSQL. */
  protected async beforeRunWrite(_trx: Trx, _runId: string): Promise<void> {}
  /** First in a publish's transaction, keyed by kind and name. */
  protected versionLock: ((trx: Trx, key: string) => Promise<void>) | undefined = undefined;

  async publishVersion(version: NewGraphVersion): Promise<{ published: boolean; record: GraphVersionRecord }> {
    const { row, published } = await publishVersion(this.db, this.engine, {
      table: "graph_versions",
      row: {
        name: version.name,
        content_hash: version.contentHash,
        plugin: version.plugin,
        plugin_version: version.pluginVersion,
        plugin_path: version.pluginPath,
        definition: this.engine.jsonText(JSON.stringify(version.definition)),
      },
      ...(this.versionLock ? { lock: this.versionLock } : {}),
    });
    return { published, record: toGraphVersion(row) };
  }

  async getVersion(name: string, version?: number): Promise<GraphVersionRecord | undefined> {
    const row = await getVersionRow(this.db, this.engine, "graph_versions", name, version);
    return row ? toGraphVersion(row) : undefined;
  }

  async listLatestVersions(): Promise<GraphVersionRecord[]> {
    return (await latestVersionRows(this.db, "graph_versions")).map(toGraphVersion);
  }

  async putGraphJob(job: GraphJobRecord): Promise<void> {
    await this.db
      .insertInto("graph_jobs")
      .values({
        job_id: job.jobId,
        graph: job.graph,
        version: job.version,
        pinned_agents: this.engine.jsonText(JSON.stringify(job.pinnedAgents)),
        created_at: this.engine.time(job.createdAt),
      })
      .execute();
  }

  async getGraphJob(jobId: string): Promise<GraphJobRecord | undefined> {
    const row = await this.db.selectFrom("graph_jobs").selectAll().where("job_id", "=", jobId).executeTakeFirst();
    return row ? toGraphJob(row) : undefined;
  }

  async getStepJob(idempotencyKey: string): Promise<string | undefined> {
    const row = await this.db
      .selectFrom("graph_step_jobs")
      .select("step_job_id")
      .where("idempotency_key", "=", idempotencyKey)
      .executeTakeFirst();
    return row?.step_job_id;
  }

  async putStepJob(record: StepJobRecord): Promise<void> {
    await this.db.transaction().execute(async (trx) => {
      // Under the run's lease: a replica that lost the run cannot replace the job its new owner recorded.
      await this.beforeRunWrite(trx, record.runId);
      const row = {
        idempotency_key: record.idempotencyKey,
        run_id: record.runId,
        step_job_id: record.stepJobId,
        created_at: this.engine.time(new Date()),
      };
      const { idempotency_key: _, ...rest } = row;
      await trx
        .insertInto("graph_step_jobs")
        .values(row)
        .onConflict((oc) => oc.column("idempotency_key").doUpdateSet(rest))
        .execute();
    });
  }

  async listStepJobs(runId: string): Promise<StepJobRecord[]> {
    const rows = await this.db
      .selectFrom("graph_step_jobs")
      .select(["idempotency_key", "step_job_id"])
      .where("run_id", "=", runId)
      .orderBy("created_at")
      // Ties in the order recorded: SQLite's rowid; on PostgreSQL times are microseconds, ties are rare.
      .orderBy(this.engine.name === "sqlite" ? ("rowid" as never) : "idempotency_key")
      .execute();
    return rows.map((r) => ({ idempotencyKey: r.idempotency_key, runId, stepJobId: r.step_job_id }));
  }

  abstract close(): Promise<void>;
}
