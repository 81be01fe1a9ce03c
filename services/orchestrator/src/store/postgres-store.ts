// The JobStore on PostgreSQL (node-postgres), for several orchestrator
// replicas sharing one database. Same contract as the SQLite store
// (test/job-store-suite.ts runs against both); what differs is concurrency:
// SQLite has one writer, here several replicas write at once, so every
// read-modify-write locks the row it depends on (the job row for event
// sequence numbers, an advisory lock for an agent's next version).
// Job writes are fenced (lease-manager.ts): a job this replica works on is
// written only while its lease is still this replica's, checked in the same
// transaction as the write (`fences`, or one fixed fence for a `fenced()`
// view). Writes to jobs this replica does not work on (a person's answer, a
// cancel taken here for a job another replica runs) are not fenced.
import { create, fromJson, fromJsonString, toJson, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { RawEventSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobEventSchema, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type pg from "pg";
import type {
  AgentVersionRecord,
  JobAppend,
  JobPatch,
  JobRecord,
  JobStore,
  ListJobsQuery,
  ListPermissionsQuery,
  NewAgentVersion,
  OperationCheckpoint,
  PermissionRecord,
  PluginRecord,
  PublishResult,
  SessionStderr,
  StderrAppend,
  StderrPiece,
  StoredLifecycleEvent,
} from "./job-store.js";
import { agentVersionColumns, keptPiece, likeEscaped } from "./job-store.js";
import type { ClusterNotifier } from "../cluster/cluster-notifier.js";
import { assertLeaseHeld, type LeaseFence } from "../cluster/lease-manager.js";
import { failedPrecondition, notFound } from "../orchestrator-error.js";
import { createPostgresPool, migrateOrchestrator, type PostgresConnectionOptions } from "./postgres-migrations.js";
import { publishPostgresVersion } from "./postgres-versions.js";
import { withTransaction } from "@oz0/postgres";
import {
  JOB_COLUMNS,
  jsonOrNull,
  patchValue,
  toAgent,
  toJob,
  toPermission,
  toPlugin,
  type AgentRow,
  type JobRow,
  type PermissionRow,
  type PluginRow,
} from "./postgres-rows.js";

type Queryable = pg.Pool | pg.PoolClient;

export interface PostgresJobStoreOptions extends PostgresConnectionOptions {
  /**
   * When set, an append that stores a decided permission also publishes it
   * here, in the same transaction: the replica owning the job hears of an
   * answer taken at any replica, and only once the answer is committed.
   */
  notifier?: ClusterNotifier;
}

/** Which lease fences writes to a job (job-leases.ts). */
export interface JobFences {
  fenceFor(jobId: string): LeaseFence | undefined;
}

export class PostgresJobStore implements JobStore {
  readonly #pool: pg.Pool;
  readonly #ownsPool: boolean;
  readonly #fence: LeaseFence | undefined;
  readonly #fences: JobFences | undefined;
  readonly #notifier: ClusterNotifier | undefined;

  private constructor(options: {
    pool: pg.Pool;
    ownsPool: boolean;
    fence?: LeaseFence;
    fences?: JobFences;
    notifier?: ClusterNotifier;
  }) {
    this.#pool = options.pool;
    this.#ownsPool = options.ownsPool;
    this.#fence = options.fence;
    this.#fences = options.fences;
    this.#notifier = options.notifier;
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
    return new PostgresJobStore({ pool, ownsPool: true, ...(options.notifier ? { notifier: options.notifier } : {}) });
  }

  /**
   * The same store whose job writes (`append`, `updateJob`) succeed only while
   * `fence` still holds its lease: a replica that lost a job's lease (paused,
   * partitioned) cannot overwrite what the new owner writes. Closing the
   * fenced view leaves the shared pool open.
   */
  fenced(fence: LeaseFence): PostgresJobStore {
    return new PostgresJobStore({
      pool: this.#pool,
      ownsPool: false,
      fence,
      ...(this.#notifier ? { notifier: this.#notifier } : {}),
    });
  }

  /**
   * The same store with each job's writes fenced by the lease `fences` gives
   * for it (the jobs this replica works on); the view leaves the pool open.
   */
  withFences(fences: JobFences): PostgresJobStore {
    return new PostgresJobStore({
      pool: this.#pool,
      ownsPool: false,
      fences,
      ...(this.#notifier ? { notifier: this.#notifier } : {}),
    });
  }

  /** The pool, for modules that share its connections (leases, the node registry). */
  get pool(): pg.Pool {
    return this.#pool;
  }

  async putPlugin(record: PluginRecord): Promise<void> {
    await this.#pool.query(
      `INSERT INTO plugins (name, version, description, source, path, manifest, installed_at) VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (name) DO UPDATE SET version = excluded.version, description = excluded.description, source = excluded.source,
       path = excluded.path, manifest = excluded.manifest, installed_at = excluded.installed_at`,
      [
        record.name,
        record.version,
        record.description,
        record.source,
        record.path,
        JSON.stringify(record.manifest),
        record.installedAt,
      ],
    );
  }

  async getPlugin(name: string): Promise<PluginRecord | undefined> {
    const { rows } = await this.#pool.query<PluginRow>("SELECT * FROM plugins WHERE name = $1", [name]);
    return rows[0] ? toPlugin(rows[0]) : undefined;
  }

  async listPlugins(): Promise<PluginRecord[]> {
    const { rows } = await this.#pool.query<PluginRow>("SELECT * FROM plugins ORDER BY name");
    return rows.map(toPlugin);
  }

  async publishAgentVersion(version: NewAgentVersion): Promise<PublishResult> {
    const { row, published } = await publishPostgresVersion<AgentRow>(this.#pool, {
      table: "agent_versions",
      name: version.name,
      contentHash: version.contentHash,
      columns: agentVersionColumns(version),
    });
    return { record: toAgent(row), published };
  }

  async getAgentVersion(name: string, version?: number): Promise<AgentVersionRecord | undefined> {
    const { rows } = version
      ? await this.#pool.query<AgentRow>("SELECT * FROM agent_versions WHERE name = $1 AND version = $2", [
          name,
          version,
        ])
      : await this.#pool.query<AgentRow>("SELECT * FROM agent_versions WHERE name = $1 ORDER BY version DESC LIMIT 1", [
          name,
        ]);
    return rows[0] ? toAgent(rows[0]) : undefined;
  }

  async listAgents(): Promise<AgentVersionRecord[]> {
    const { rows } = await this.#pool.query<AgentRow>(
      "SELECT DISTINCT ON (name) * FROM agent_versions ORDER BY name, version DESC",
    );
    return rows.map(toAgent);
  }

  async listAgentVersions(name: string): Promise<AgentVersionRecord[]> {
    const { rows } = await this.#pool.query<AgentRow>("SELECT * FROM agent_versions WHERE name = $1 ORDER BY version", [
      name,
    ]);
    return rows.map(toAgent);
  }

  async createJob(job: JobRecord): Promise<void> {
    await this.#pool.query(
      `INSERT INTO jobs (id, agent_name, agent_version, input, state, created_at, updated_at, finished_at, result_text, stop_reason,
       error, session_id, sandbox_url, last_seq, sandbox_seq, attachments, token_id, cancel_requested_at, served_tools, started_by, started_at, trace_id)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22)`,
      [
        job.id,
        job.agentName,
        job.agentVersion,
        job.input,
        job.state,
        job.createdAt,
        job.updatedAt,
        job.finishedAt ?? null,
        job.resultText,
        job.stopReason,
        job.error,
        job.sessionId,
        job.sandboxUrl,
        job.lastSeq,
        job.sandboxSeq,
        JSON.stringify(job.attachments),
        job.tokenId,
        job.cancelRequestedAt ?? null,
        job.servedTools,
        job.startedBy,
        job.startedAt ?? null,
        job.traceId ?? "",
      ],
    );
  }

  async getJob(id: string): Promise<JobRecord | undefined> {
    const { rows } = await this.#pool.query<JobRow>("SELECT * FROM jobs WHERE id = $1", [id]);
    return rows[0] ? toJob(rows[0]) : undefined;
  }

  async listJobs(query: ListJobsQuery = {}): Promise<JobRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (query.state) {
      args.push(query.state);
      where.push(`state = $${args.length}`);
    }
    if (query.agent) {
      args.push(query.agent);
      where.push(`agent_name = $${args.length}`);
    }
    if (query.text) {
      args.push(query.text, `%${likeEscaped(query.text)}%`);
      where.push(`(id = $${args.length - 1} OR input ILIKE $${args.length} ESCAPE '\\')`);
    }
    if (query.after) {
      args.push(query.after);
      where.push(`(created_at, ord) < (SELECT created_at, ord FROM jobs WHERE id = $${args.length})`);
    }
    args.push(query.limit ?? 50);
    const sql = `SELECT * FROM jobs ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY created_at DESC, ord DESC LIMIT $${args.length}`;
    const { rows } = await this.#pool.query<JobRow>(sql, args);
    return rows.map(toJob);
  }

  async #updateJob(client: Queryable, id: string, patch: JobPatch): Promise<JobRecord> {
    const keys = (Object.keys(patch) as (keyof JobPatch)[]).filter((k) => k in JOB_COLUMNS);
    const sets = keys.map((k, i) => `${JOB_COLUMNS[k]} = $${i + 2}`);
    // With nothing to set, still read the row back (and say when it is missing).
    const sql = sets.length
      ? `UPDATE jobs SET ${sets.join(", ")} WHERE id = $1 RETURNING *`
      : "SELECT * FROM jobs WHERE id = $1";
    const { rows } = await client.query<JobRow>(sql, [id, ...keys.map((k) => patchValue(k, patch[k]))]);
    if (!rows[0]) throw notFound(`job ${id} not found; list jobs with \`oz0 jobs list\``);
    return toJob(rows[0]);
  }

  async updateJob(id: string, patch: JobPatch): Promise<JobRecord> {
    return withTransaction(this.#pool, async (client) => {
      await this.#checkFence(client, id);
      return this.#updateJob(client, id, { ...patch, updatedAt: patch.updatedAt ?? new Date() });
    });
  }

  async append(change: JobAppend): Promise<JobEvent[]> {
    return withTransaction(this.#pool, async (client) => {
      await this.#checkFence(client, change.jobId);
      // The row lock orders concurrent appends to one job, so sequence numbers stay gap-free across replicas.
      const locked = await client.query<{ last_seq: string }>("SELECT last_seq FROM jobs WHERE id = $1 FOR UPDATE", [
        change.jobId,
      ]);
      if (!locked.rows[0]) throw notFound(`job ${change.jobId} not found`);
      let seq = Number(locked.rows[0].last_seq);
      const stored: JobEvent[] = [];
      for (const event of change.events) {
        seq += 1;
        stored.push(
          create(JobEventSchema, {
            ...event,
            jobId: change.jobId,
            seq: BigInt(seq),
            time: event.time ?? timestampFromDate(new Date()),
          }),
        );
      }
      if (stored.length > 0) {
        // One INSERT for the whole step: a round trip per event would dominate a busy job.
        await client.query(
          `INSERT INTO job_events (job_id, seq, time, event)
           SELECT $1, s, now(), e FROM unnest($2::bigint[], $3::jsonb[]) AS t(s, e)`,
          [
            change.jobId,
            stored.map((e) => e.seq.toString()),
            stored.map((e) => JSON.stringify(toJson(JobEventSchema, e))),
          ],
        );
      }
      await client.query("UPDATE jobs SET last_seq = $2, updated_at = now() WHERE id = $1", [change.jobId, seq]);
      if (change.job) await this.#updateJob(client, change.jobId, change.job);
      for (const permission of change.permissions ?? []) {
        if (permission.status !== "pending") await this.#checkUndecided(client, permission);
        await this.#upsertPermission(client, permission);
        // Sent on commit only: a rolled-back answer wakes nobody.
        if (this.#notifier && permission.status !== "pending") {
          await this.#notifier.publish(client, {
            jobId: permission.jobId,
            permissionId: permission.id,
            status: permission.status,
          });
        }
      }
      await this.#keepLifecycle(client, change.lifecycle ?? []);
      if (change.stderr) await this.#appendStderr(client, change.jobId, change.stderr);
      // Watchers at other replicas read the new events when this commits (job-feed.ts).
      if (this.#notifier && stored.length > 0)
        await this.#notifier.publishAppended(client, { jobId: change.jobId, fromSeq: seq - stored.length + 1, seq });
      return stored;
    });
  }

  async #appendStderr(client: Queryable, jobId: string, { sessionId, piece, maxBytes }: StderrAppend): Promise<void> {
    // The session's row, locked (created first when missing): its bookkeeping and its pieces change together.
    await client.query(
      `INSERT INTO session_stderr (job_id, session_id, last_seq, kept_bytes, dropped_bytes, trailing_dropped_bytes) VALUES ($1, $2, 0, 0, 0, 0)
       ON CONFLICT (job_id, session_id) DO NOTHING`,
      [jobId, sessionId],
    );
    const { rows } = await client.query<{
      last_seq: string;
      kept_bytes: string;
      dropped_bytes: string;
      trailing_dropped_bytes: string;
    }>(
      "SELECT last_seq, kept_bytes, dropped_bytes, trailing_dropped_bytes FROM session_stderr WHERE job_id = $1 AND session_id = $2 FOR UPDATE",
      [jobId, sessionId],
    );
    const row = rows[0]!;
    if (piece.seq <= Number(row.last_seq)) return;
    const session = {
      kept: Number(row.kept_bytes),
      dropped: Number(row.dropped_bytes),
      trailing: Number(row.trailing_dropped_bytes),
    };
    const kept = keptPiece(piece, maxBytes);
    if (kept.text === "") {
      // Nothing to keep: the bytes are dropped after the last piece kept.
      session.trailing += kept.droppedBytes;
    } else {
      await client.query(
        "INSERT INTO stderr_pieces (job_id, session_id, seq, text, bytes, dropped_bytes) VALUES ($1, $2, $3, $4, $5, $6)",
        [jobId, sessionId, piece.seq, kept.text, kept.bytes, kept.droppedBytes + session.trailing],
      );
      session.trailing = 0;
      session.kept += kept.bytes;
      if (session.kept > maxBytes) {
        // The oldest pieces go, as few as bring the session back under its allowance (the newest always stays).
        const { rows: gone } = await client.query<{ bytes: number; dropped_bytes: string }>(
          `DELETE FROM stderr_pieces p USING (
             SELECT seq FROM (
               SELECT seq, sum(bytes) OVER (ORDER BY seq DESC) AS newer FROM stderr_pieces WHERE job_id = $1 AND session_id = $2
             ) w WHERE newer > $3 AND seq <> $4
           ) old WHERE p.job_id = $1 AND p.session_id = $2 AND p.seq = old.seq
           RETURNING p.bytes, p.dropped_bytes`,
          [jobId, sessionId, maxBytes, piece.seq],
        );
        for (const old of gone) {
          session.kept -= old.bytes;
          session.dropped += Number(old.dropped_bytes) + old.bytes;
        }
      }
    }
    await client.query(
      "UPDATE session_stderr SET last_seq = $3, kept_bytes = $4, dropped_bytes = $5, trailing_dropped_bytes = $6 WHERE job_id = $1 AND session_id = $2",
      [jobId, sessionId, piece.seq, session.kept, session.dropped, session.trailing],
    );
  }

  async listStderrSessions(jobId: string): Promise<SessionStderr[]> {
    const { rows } = await this.#pool.query<{
      session_id: string;
      kept_bytes: string;
      dropped_bytes: string;
      trailing_dropped_bytes: string;
    }>(
      "SELECT session_id, kept_bytes, dropped_bytes, trailing_dropped_bytes FROM session_stderr WHERE job_id = $1 ORDER BY ord",
      [jobId],
    );
    return rows.map((r) => ({
      sessionId: r.session_id,
      keptBytes: Number(r.kept_bytes),
      droppedBytes: Number(r.dropped_bytes),
      trailingDroppedBytes: Number(r.trailing_dropped_bytes),
    }));
  }

  async listStderrPieces(jobId: string, sessionId: string, afterSeq: number, limit = 1000): Promise<StderrPiece[]> {
    const { rows } = await this.#pool.query<{ seq: string; text: string; dropped_bytes: string }>(
      "SELECT seq, text, dropped_bytes FROM stderr_pieces WHERE job_id = $1 AND session_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
      [jobId, sessionId, afterSeq, limit],
    );
    return rows.map((r) => ({ seq: Number(r.seq), text: r.text, droppedBytes: Number(r.dropped_bytes) }));
  }

  async #keepLifecycle(client: Queryable, events: RawEvent[]): Promise<void> {
    if (events.length === 0) return;
    await client.query("INSERT INTO lifecycle_outbox (event) SELECT unnest($1::text[])", [
      events.map((e) => toJsonString(RawEventSchema, e)),
    ]);
  }

  async putLifecycleEvents(events: RawEvent[]): Promise<void> {
    await this.#keepLifecycle(this.#pool, events);
  }

  async claimLifecycleEvents(options: { limit: number; claimMs: number }): Promise<StoredLifecycleEvent[]> {
    // SKIP LOCKED: replicas claiming at once each get other events, and none waits for another.
    const { rows } = await this.#pool.query<{ seq: string; event: string }>(
      `UPDATE lifecycle_outbox SET claimed_until = now() + $2 * interval '1 millisecond'
       WHERE seq IN (SELECT seq FROM lifecycle_outbox WHERE claimed_until IS NULL OR claimed_until < now()
                     ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED)
       RETURNING seq, event`,
      [options.limit, options.claimMs],
    );
    return rows
      .map((r) => ({ seq: Number(r.seq), event: fromJsonString(RawEventSchema, r.event) }))
      .sort((a, b) => a.seq - b.seq);
  }

  async deleteLifecycleEvents(seqs: number[]): Promise<void> {
    if (seqs.length === 0) return;
    await this.#pool.query("DELETE FROM lifecycle_outbox WHERE seq = ANY($1::bigint[])", [seqs]);
  }

  async releaseLifecycleEvents(seqs: number[]): Promise<void> {
    if (seqs.length === 0) return;
    await this.#pool.query("UPDATE lifecycle_outbox SET claimed_until = NULL WHERE seq = ANY($1::bigint[])", [seqs]);
  }

  /**
   * Replicas decide a waiting call concurrently (a person at one, the
   * deadline at the owner): the first decision stands, a different later
   * one is refused and rolled back with everything it came with.
   */
  async #checkUndecided(client: Queryable, p: PermissionRecord): Promise<void> {
    const { rows } = await client.query<{ status: string; answered_by: string }>(
      "SELECT status, answered_by FROM permissions WHERE job_id = $1 AND id = $2 FOR UPDATE",
      [p.jobId, p.id],
    );
    const current = rows[0];
    if (current && current.status !== "pending" && current.status !== p.status) {
      throw failedPrecondition(
        `call ${p.id} of job ${p.jobId} was already ${current.status}${current.answered_by ? ` by ${current.answered_by}` : ""} meanwhile; this ${p.status} answer is refused`,
      );
    }
  }

  async listJobEvents(jobId: string, afterSeq: number, limit = 1000): Promise<JobEvent[]> {
    const { rows } = await this.#pool.query<{ event: JsonValue }>(
      "SELECT event FROM job_events WHERE job_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
      [jobId, afterSeq, limit],
    );
    return rows.map((r) => fromJson(JobEventSchema, r.event));
  }

  async #upsertPermission(client: Queryable, p: PermissionRecord): Promise<void> {
    await client.query(
      `INSERT INTO permissions (job_id, id, call_id, session_id, tool, input, title, needs_person, status, reason, decider, answered_by,
       answer_input, requested_at, answered_at, delivered) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
       ON CONFLICT (job_id, id) DO UPDATE SET status = excluded.status, reason = excluded.reason, decider = excluded.decider,
       answered_by = excluded.answered_by, answer_input = excluded.answer_input, answered_at = excluded.answered_at,
       delivered = excluded.delivered, needs_person = excluded.needs_person`,
      [
        p.jobId,
        p.id,
        p.callId,
        p.sessionId,
        p.tool,
        jsonOrNull(p.input),
        p.title,
        p.needsPerson,
        p.status,
        p.reason,
        p.decider ?? null,
        p.answeredBy,
        jsonOrNull(p.answerInput),
        p.requestedAt,
        p.answeredAt ?? null,
        p.delivered,
      ],
    );
  }

  async getPermission(jobId: string, id: string): Promise<PermissionRecord | undefined> {
    // By request id first, else by the tool call id, as the SQLite store does.
    const { rows } = await this.#pool.query<PermissionRow>(
      "SELECT * FROM permissions WHERE job_id = $1 AND (id = $2 OR call_id = $2) ORDER BY (id = $2) DESC LIMIT 1",
      [jobId, id],
    );
    return rows[0] ? toPermission(rows[0]) : undefined;
  }

  async listPermissions(query: ListPermissionsQuery): Promise<PermissionRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (query.jobId) {
      args.push(query.jobId);
      where.push(`job_id = $${args.length}`);
    }
    if (query.approvalsOnly) where.push("needs_person");
    if (query.pendingOnly) where.push("status = 'pending'");
    if (query.undeliveredOnly) where.push("status <> 'pending' AND NOT delivered");
    const sql = `SELECT * FROM permissions ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY requested_at, ord`;
    const { rows } = await this.#pool.query<PermissionRow>(sql, args);
    return rows.map(toPermission);
  }

  async markPermissionDelivered(jobId: string, id: string): Promise<void> {
    await this.#pool.query("UPDATE permissions SET delivered = true WHERE job_id = $1 AND id = $2", [jobId, id]);
  }

  async putOperationCheckpoint(record: OperationCheckpoint): Promise<void> {
    // Fenced like every job write: a replica that lost the job's lease must not record its operations.
    await withTransaction(this.#pool, async (client) => {
      await this.#checkFence(client, record.jobId);
      await client.query(
        `INSERT INTO operation_checkpoints (job_id, call_id, record, delivered) VALUES ($1, $2, $3, $4)
         ON CONFLICT (job_id, call_id) DO UPDATE SET record = excluded.record, delivered = excluded.delivered`,
        [record.jobId, record.callId, JSON.stringify(record), record.delivered],
      );
    });
  }

  async getOperationCheckpoint(jobId: string, callId: string): Promise<OperationCheckpoint | undefined> {
    const { rows } = await this.#pool.query<{ record: OperationCheckpoint }>(
      "SELECT record FROM operation_checkpoints WHERE job_id = $1 AND call_id = $2",
      [jobId, callId],
    );
    return rows[0]?.record;
  }

  async listOperationCheckpoints(jobId: string): Promise<OperationCheckpoint[]> {
    const { rows } = await this.#pool.query<{ record: OperationCheckpoint }>(
      "SELECT record FROM operation_checkpoints WHERE job_id = $1 ORDER BY call_id",
      [jobId],
    );
    return rows.map((r) => r.record);
  }

  async #checkFence(client: pg.PoolClient, jobId: string): Promise<void> {
    const fence = this.#fence ?? this.#fences?.fenceFor(jobId);
    if (fence) await assertLeaseHeld(client, fence);
  }

  async close(): Promise<void> {
    if (this.#ownsPool) await this.#pool.end();
  }
}
