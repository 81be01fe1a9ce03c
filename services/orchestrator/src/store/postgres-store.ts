// The JobStore on PostgreSQL, for several orchestrator replicas sharing one
// database: the shared queries of sql-job-store.ts, plus what replicas
// writing at once need. Row locks (FOR UPDATE, in the shared queries where
// the engine has them) order appends to one job; an advisory lock orders
// publishers of one agent's next version; a second, different decision on a
// call is refused; answers and appended events are announced with NOTIFY in
// their transaction; outbox events are claimed with SKIP LOCKED.
// Job writes are fenced (cluster/lease-manager.ts): a job this replica works
// on is written only while its lease is still this replica's, checked in the
// same transaction as the write (`fences`, or one fixed fence for a
// `fenced()` view). Writes to jobs this replica does not work on (a person's
// answer, a cancel taken here for a job another replica runs) are not fenced.
import { isDeepStrictEqual } from "node:util";
import { sql } from "kysely";
import type pg from "pg";
import type { ClusterNotifier } from "../cluster/cluster-notifier.js";
import { assertLeaseHeld, type LeaseFence } from "../cluster/lease-manager.js";
import {
  ACTIVE_JOB_STATES,
  DecidedMeanwhileError,
  storedLifecycleEvents,
  type PermissionRecord,
  type StoredLifecycleEvent,
} from "./job-store.js";
import { compiledOnce } from "./compiled-once.js";
import { migrateOrchestrator } from "./migrations.js";
import { advisoryXactLock, transactionClient } from "./postgres-locks.js";
import { createPostgresPool, POSTGRES, postgresDb, type Db, type PostgresConnectionOptions } from "./sql-database.js";
import { SqlJobStore, type Trx } from "./sql-job-store.js";
import { fromJson } from "./sql-rows.js";

export interface PostgresJobStoreOptions extends PostgresConnectionOptions {
  /**
   * When set, an append that stores a decided permission also publishes it
   * here, in the same transaction: the replica owning the job hears of an
   * answer taken at any replica, and only once the answer is committed.
   */
  notifier?: ClusterNotifier;
}

/**
 * A stored lifecycle event's job id: the first `"jobId":"…"` of its proto3 JSON (toJsonString writes it without
 * spaces, before the attributes, whose JSON is an escaped string). A pattern rather than a JSON cast, so a row that
 * does not parse cannot fail every claim. None (NULL) for an event of no job, which is never held back.
 */
const STORED_JOB_ID = '"jobId":"((?:[^"\\\\]|\\\\.)*)"';

/** Which lease fences writes to a job (job-leases.ts). */
export interface JobFences {
  fenceFor(jobId: string): LeaseFence | undefined;
}

interface Shared {
  pool: pg.Pool;
  db: Db;
  ownsPool: boolean;
  fence?: LeaseFence;
  fences?: JobFences;
  notifier?: ClusterNotifier;
}

// Once per decided call of every job: compiled once (compiled-once.ts).
const LOCK_PERMISSION = compiledOnce((db, v: { jobId: string; id: string }) =>
  db
    .selectFrom("permissions")
    .select(["status", "answered_by", "answer_input"])
    .where("job_id", "=", v.jobId)
    .where("id", "=", v.id)
    .forUpdate(),
);

export class PostgresJobStore extends SqlJobStore {
  readonly #shared: Shared;

  private constructor(shared: Shared) {
    super(shared.db, POSTGRES);
    this.#shared = shared;
    this.versionLock = advisoryXactLock;
  }

  /** Connects and runs pending migrations (safe when several replicas open at once). */
  static async open(options: PostgresJobStoreOptions): Promise<PostgresJobStore> {
    const pool = createPostgresPool(options);
    try {
      await migrateOrchestrator(pool, options.schema ?? "oz0");
    } catch (error) {
      await pool.end();
      throw error;
    }
    return new PostgresJobStore({
      pool,
      db: postgresDb(pool),
      ownsPool: true,
      ...(options.notifier ? { notifier: options.notifier } : {}),
    });
  }

  /**
   * The same store whose job writes (`append`, `updateJob`) succeed only while
   * `fence` still holds its lease: a replica that lost a job's lease (paused,
   * partitioned) cannot overwrite what the new owner writes. Closing the
   * fenced view leaves the shared pool open.
   */
  fenced(fence: LeaseFence): PostgresJobStore {
    const { fences: _, ...shared } = this.#shared;
    return new PostgresJobStore({ ...shared, ownsPool: false, fence });
  }

  /**
   * The same store with each job's writes fenced by the lease `fences` gives
   * for it (the jobs this replica works on); the view leaves the pool open.
   */
  withFences(fences: JobFences): PostgresJobStore {
    const { fence: _, ...shared } = this.#shared;
    return new PostgresJobStore({ ...shared, ownsPool: false, fences });
  }

  /** The pool, for modules that share its connections (leases, the node registry). */
  get pool(): pg.Pool {
    return this.#shared.pool;
  }

  protected override async beforeJobWrite(trx: Trx, jobId: string): Promise<void> {
    const fence = this.#shared.fence ?? this.#shared.fences?.fenceFor(jobId);
    if (fence) await assertLeaseHeld(transactionClient(trx), fence);
  }

  /**
   * Replicas decide a waiting call concurrently (a person at one, the
   * deadline at the owner, another person at a third): the first decision
   * stands, a different later one (another status, another answerer,
   * another input) is refused and rolled back with everything it came with.
   */
  protected override async beforeDecision(trx: Trx, p: PermissionRecord): Promise<void> {
    const [current] = (await LOCK_PERMISSION.execute(trx, POSTGRES, { jobId: p.jobId, id: p.id })).rows;
    if (!current || current.status === "pending") return;
    // The same status is not the same decision: approved twice, by two people with two edited inputs, the second
    // was written over the first, and the record named an input the session was never sent.
    const sameDecision =
      current.status === p.status &&
      current.answered_by === p.answeredBy &&
      isDeepStrictEqual(current.answer_input === null ? undefined : fromJson(current.answer_input), p.answerInput);
    if (!sameDecision) throw new DecidedMeanwhileError(p, { status: current.status, answeredBy: current.answered_by });
  }

  // Sent on commit only: a rolled-back answer wakes nobody.
  protected override async afterDecision(trx: Trx, p: PermissionRecord): Promise<void> {
    await this.#shared.notifier?.publish(transactionClient(trx), {
      jobId: p.jobId,
      permissionId: p.id,
      status: p.status,
    });
  }

  // The replica that owns the job makes sure its session stops when this commits (session-stops.ts).
  protected override async afterCancelRequested(trx: Trx, jobId: string): Promise<void> {
    await this.#shared.notifier?.publishCancelRequested(transactionClient(trx), { jobId });
  }

  // Watchers at other replicas read the new events when this commits (job-feed.ts).
  protected override async afterAppend(trx: Trx, jobId: string, fromSeq: number, seq: number): Promise<void> {
    await this.#shared.notifier?.publishAppended(transactionClient(trx), { jobId, fromSeq, seq });
  }

  override async claimLifecycleEvents(options: { limit: number; claimMs: number }): Promise<StoredLifecycleEvent[]> {
    // Replicas ship at once, each its own claim, and the events service numbers events as their Publish calls
    // arrive: a replica that claimed a job's later event while another still sent its earlier one put them on
    // the stream (and Kafka) out of order, a job's completion before its creation. A claim leaves every job
    // with an event claimed elsewhere, so a job's events go with one shipper at a time, oldest first. Claims
    // take turns (an advisory lock, for the claim's statement only), so each sees the claims committed before
    // it. The claim's end is on the database's clock, which every replica shares.
    const rows = await this.db.transaction().execute(async (trx) => {
      await advisoryXactLock(trx, "lifecycle_outbox claim");
      const { rows } = await sql<{ seq: string; event: string }>`
        UPDATE lifecycle_outbox SET claimed_until = now() + ${options.claimMs} * interval '1 millisecond'
        WHERE seq IN (
          SELECT seq FROM lifecycle_outbox
          WHERE (claimed_until IS NULL OR claimed_until < now())
            AND coalesce(substring(event from ${STORED_JOB_ID}), '') NOT IN (
              SELECT substring(event from ${STORED_JOB_ID}) FROM lifecycle_outbox
              WHERE claimed_until >= now() AND substring(event from ${STORED_JOB_ID}) <> '')
          ORDER BY seq LIMIT ${options.limit} FOR UPDATE SKIP LOCKED)
        RETURNING seq, event`.execute(trx);
      return rows;
    });
    return storedLifecycleEvents(rows.map((r) => ({ seq: Number(r.seq), json: r.event })));
  }

  override async claimSessionTokensToRevoke(options: { limit: number; claimMs: number }): Promise<string[]> {
    // SKIP LOCKED, as the lifecycle outbox's claim: replicas sweeping at once each get other tokens.
    const { rows } = await sql<{ token_id: string }>`
      UPDATE session_tokens SET claimed_until = now() + ${options.claimMs} * interval '1 millisecond'
      WHERE token_id IN (
        SELECT t.token_id FROM session_tokens t LEFT JOIN jobs j ON j.id = t.job_id
        WHERE (t.revoke_asked OR j.state NOT IN (${sql.join([...ACTIVE_JOB_STATES])}))
          AND (t.claimed_until IS NULL OR t.claimed_until < now())
        LIMIT ${options.limit} FOR UPDATE OF t SKIP LOCKED)
      RETURNING token_id`.execute(this.db);
    return rows.map((r) => r.token_id);
  }

  override async close(): Promise<void> {
    if (this.#shared.ownsPool) await this.#shared.pool.end();
  }
}
