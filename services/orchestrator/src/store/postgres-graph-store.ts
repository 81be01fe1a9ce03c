// The GraphStore of orchestrator replicas sharing one PostgreSQL database:
// the shared queries of sql-graph-store.ts and the checkpoints of
// postgres-checkpoint-store.ts in the job store's schema, on the job
// store's pool, so the replica that takes a dead replica's graph job over
// finds everything it needs to resume it. A run's step jobs are written
// under its lease; publishers of one name take an advisory lock.
import type pg from "pg";
import { assertLeaseHeld } from "../cluster/lease-manager.js";
import { migrateOrchestrator } from "./migrations.js";
import { PostgresCheckpointStore } from "./postgres-checkpoint-store.js";
import { advisoryXactLock, transactionClient } from "./postgres-locks.js";
import type { JobFences } from "./postgres-store.js";
import { POSTGRES, postgresDb } from "./sql-database.js";
import { SqlGraphStore } from "./sql-graph-store.js";
import type { Trx } from "./sql-job-store.js";

export class PostgresGraphStore extends SqlGraphStore {
  readonly checkpoints: PostgresCheckpointStore;
  readonly #fences: JobFences | undefined;

  private constructor(pool: pg.Pool, fences?: JobFences) {
    super(postgresDb(pool), POSTGRES);
    this.checkpoints = new PostgresCheckpointStore(pool, fences);
    this.#fences = fences;
    this.versionLock = advisoryXactLock;
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

  protected override async beforeRunWrite(trx: Trx, runId: string): Promise<void> {
    const fence = this.#fences?.fenceFor(runId);
    if (fence) await assertLeaseHeld(transactionClient(trx), fence);
  }

  /** The pool is the job store's: it closes it. */
  async close(): Promise<void> {}
}
