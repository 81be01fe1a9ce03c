// The JobStore's queries, once for SQLite and PostgreSQL (Kysely,
// sql-database.ts). Every multi-row change is one transaction. What only
// replicas sharing PostgreSQL need is a hook here that postgres-store.ts
// fills in: a job write's lease fence, refusing a second decision on a call,
// NOTIFY of answers and appended events, the advisory lock on a name's next
// version, and claiming outbox events with SKIP LOCKED; SQLite has one
// writer and needs none of them.
import { create, fromJson as protoFromJson, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { RawEventSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobEventSchema, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { sql, type Transaction, type Insertable, type Updateable } from "kysely";
import { notFound } from "../orchestrator-error.js";
import {
  ACTIVE_JOB_STATES,
  keptPiece,
  likeEscaped,
  type AgentVersionRecord,
  type JobAppend,
  type JobCreation,
  type JobPatch,
  type JobRecord,
  type JobStore,
  type ListJobsQuery,
  type ListPermissionsQuery,
  type NewAgentVersion,
  type OperationCheckpoint,
  type PermissionRecord,
  type PluginRecord,
  type PublishResult,
  type SessionStderr,
  type StderrAppend,
  type StderrPiece,
  type StoredLifecycleEvent,
  storedLifecycleEvents,
} from "./job-store.js";
import { compiledOnce } from "./compiled-once.js";
import type {
  Bool,
  Count,
  Db,
  JobEventsTable,
  JobsTable,
  Json,
  PermissionsTable,
  SqlEngine,
  Tables,
  Time,
} from "./sql-database.js";
import { UnstorableValueError } from "./sql-database.js";
import {
  fromJson,
  jobColumns,
  jobPatchColumns,
  permissionColumns,
  toAgent,
  toJob,
  toNumber,
  toPermission,
  toPlugin,
} from "./sql-rows.js";
import { getVersionRow, latestVersionRows, publishVersion } from "./versions.js";

export type Trx = Transaction<Tables>;

/**
 * The most rows one INSERT writes. A statement has at most 65,535 parameters on PostgreSQL and 32,766 on SQLite
 * (four a job event): a step of more events (a re-attach can replay a long outage's in one burst) failed at
 * every delivery.
 */
const ROWS_PER_INSERT = 1_000;

/** `items` in consecutive parts of at most `size`; none for none. */
function inParts<T>(items: T[], size: number): T[][] {
  const parts: T[][] = [];
  for (let i = 0; i < items.length; i += size) parts.push(items.slice(i, i + size));
  return parts;
}

function jobNotFound(id: string): Error {
  return notFound(`job ${id} not found; list jobs with \`oz0 jobs list\``);
}

function toEvent(value: Json<object>): JobEvent {
  return typeof value === "string"
    ? fromJsonString(JobEventSchema, value)
    : protoFromJson(JobEventSchema, value as never);
}

/**
 * The queries a job makes many times (each append, its row read and
 * updated, its events listed, the lifecycle outbox), compiled once per
 * engine and shape (compiled-once.ts) instead of built and compiled by
 * Kysely on every call. Exported for the test that compares their SQL with
 * the builder's.
 */
export const HOT_QUERIES = {
  createJob: compiledOnce((db, v: { row: JobsTable }) => db.insertInto("jobs").values(v.row)),
  getJob: compiledOnce((db, v: { id: string }) => db.selectFrom("jobs").selectAll().where("id", "=", v.id)),
  updateJobReturning: compiledOnce((db, v: { id: string; columns: Updateable<JobsTable> }) =>
    db.updateTable("jobs").set(v.columns).where("id", "=", v.id).returningAll(),
  ),
  // An append's first statement: it numbers the events and sets the job's columns. On PostgreSQL the UPDATE's
  // row lock orders concurrent appends to one job, so sequence numbers stay gap-free across replicas.
  numberEvents: compiledOnce((db, v: { id: string; count: number; columns: Updateable<JobsTable> }) =>
    db
      .updateTable("jobs")
      .set({ last_seq: sql<Count>`last_seq + ${v.count}`, ...v.columns })
      .where("id", "=", v.id)
      .returning("last_seq"),
  ),
  insertJobEvents: compiledOnce((db, v: { rows: Insertable<JobEventsTable>[] }) =>
    db.insertInto("job_events").values(v.rows),
  ),
  listJobEvents: compiledOnce((db, v: { jobId: string; afterSeq: number; limit: number }) =>
    db
      .selectFrom("job_events")
      .select("event")
      .where("job_id", "=", v.jobId)
      .where("seq", ">", v.afterSeq)
      .orderBy("seq")
      .limit(v.limit),
  ),
  keepLifecycle: compiledOnce((db, v: { events: string[] }) =>
    db.insertInto("lifecycle_outbox").values(v.events.map((event) => ({ event }))),
  ),
  // One statement finds the oldest unclaimed events and claims them (issue 24: it was a transaction of a SELECT
  // and an UPDATE); PostgreSQL's store claims with SKIP LOCKED instead (postgres-store.ts).
  claimUnclaimedLifecycle: compiledOnce((db, v: { now: Time; until: Time; limit: number }) =>
    db
      .updateTable("lifecycle_outbox")
      .set({ claimed_until: v.until })
      .where("seq", "in", (eb) =>
        eb
          .selectFrom("lifecycle_outbox")
          .select("seq")
          .where((w) => w.or([w("claimed_until", "is", null), w("claimed_until", "<", v.now)]))
          .orderBy("seq")
          .limit(v.limit),
      )
      .returning(["seq", "event"]),
  ),
  claimLifecycle: compiledOnce((db, v: { seqs: Count[]; until: Time | null }) =>
    db.updateTable("lifecycle_outbox").set({ claimed_until: v.until }).where("seq", "in", v.seqs),
  ),
  deleteLifecycle: compiledOnce((db, v: { seqs: number[] }) =>
    db.deleteFrom("lifecycle_outbox").where("seq", "in", v.seqs),
  ),
  upsertPermission: compiledOnce((db, v: { row: PermissionsTable }) =>
    db
      .insertInto("permissions")
      .values(v.row)
      .onConflict((oc) =>
        oc.columns(["job_id", "id"]).doUpdateSet((eb) => ({
          status: eb.ref("excluded.status"),
          reason: eb.ref("excluded.reason"),
          decider: eb.ref("excluded.decider"),
          answered_by: eb.ref("excluded.answered_by"),
          answer_input: eb.ref("excluded.answer_input"),
          input_changed_by: eb.ref("excluded.input_changed_by"),
          answered_at: eb.ref("excluded.answered_at"),
          delivered: eb.ref("excluded.delivered"),
          needs_person: eb.ref("excluded.needs_person"),
        })),
      ),
  ),
  // Each filter is there when its value is (presence is part of a query's shape).
  listPermissions: compiledOnce(
    (
      db,
      v: {
        jobId?: string;
        needsPerson?: Bool;
        pending?: string;
        delivered?: Bool;
        after?: { jobId: string; id: string };
        limit?: number;
      },
      engine,
    ) => {
      const ord = sql.ref(engine.insertionOrder);
      return (
        db
          .selectFrom("permissions")
          .selectAll()
          .$if(v.jobId !== undefined, (q) => q.where("job_id", "=", v.jobId!))
          .$if(v.needsPerson !== undefined, (q) => q.where("needs_person", "=", v.needsPerson!))
          .$if(v.pending !== undefined, (q) => q.where("status", "=", v.pending!))
          .$if(v.delivered !== undefined, (q) =>
            q.where("status", "<>", "pending").where("delivered", "=", v.delivered!),
          )
          // The next page: rows after the given one in the list's order (request time, then insertion).
          .$if(v.after !== undefined, (q) =>
            q.where(
              sql<boolean>`(requested_at, ${ord}) > (SELECT requested_at, ${ord} FROM permissions WHERE job_id = ${v.after!.jobId} AND id = ${v.after!.id})`,
            ),
          )
          .orderBy("requested_at")
          .orderBy(ord)
          .$if(v.limit !== undefined, (q) => q.limit(v.limit!))
      );
    },
  ),
  runtimeCallPermits: compiledOnce(
    (db, v: { jobId: string; tool: string; callId: string; none: string; limit: number }, engine) =>
      db
        .selectFrom("permissions")
        .selectAll()
        .where("job_id", "=", v.jobId)
        .where("tool", "=", v.tool)
        .where("status", "=", "approved")
        .where((eb) => eb.or([eb("runtime_call", "=", v.none), eb("runtime_call", "=", v.callId)]))
        .orderBy("requested_at")
        .orderBy(sql.ref(engine.insertionOrder))
        .limit(v.limit),
  ),
  markPermissionDelivered: compiledOnce((db, v: { jobId: string; id: string; delivered: Bool }) =>
    db.updateTable("permissions").set({ delivered: v.delivered }).where("job_id", "=", v.jobId).where("id", "=", v.id),
  ),
  // An upsert never writes runtime_call (upsertPermission's update leaves it out): only this sets it, once.
  usePermissionForRuntimeCall: compiledOnce((db, v: { jobId: string; id: string; callId: string; none: string }) =>
    db
      .updateTable("permissions")
      .set({ runtime_call: v.callId })
      .where("job_id", "=", v.jobId)
      .where("id", "=", v.id)
      .where("status", "=", "approved")
      .where((eb) => eb.or([eb("runtime_call", "=", v.none), eb("runtime_call", "=", v.callId)])),
  ),
};

export class SqlJobStore implements JobStore {
  protected readonly db: Db;
  protected readonly engine: SqlEngine;

  constructor(db: Db, engine: SqlEngine) {
    this.db = db;
    this.engine = engine;
  }

  // Hooks: nothing to do on one writer (SQLite); postgres-store.ts overrides them.

  /** First in every transaction that writes a job's rows (its events, state, operations). */
  protected async beforeJobWrite(_trx: Trx, _jobId: string): Promise<void> {}
  /** Before a decided permission is stored. */
  protected async beforeDecision(_trx: Trx, _permission: PermissionRecord): Promise<void> {}
  /** After a decided permission is stored, in its transaction. */
  protected async afterDecision(_trx: Trx, _permission: PermissionRecord): Promise<void> {}
  /** After a job's events `fromSeq`..`seq` are stored, in their transaction. */
  protected async afterAppend(_trx: Trx, _jobId: string, _fromSeq: number, _seq: number): Promise<void> {}
  /** After a cancel of the job is stored (its `cancelRequestedAt`), in its transaction. */
  protected async afterCancelRequested(_trx: Trx, _jobId: string): Promise<void> {}
  /** First in a publish's transaction, keyed by kind and name. */
  protected versionLock: ((trx: Trx, key: string) => Promise<void>) | undefined = undefined;

  async putPlugin(record: PluginRecord): Promise<void> {
    const row = {
      name: record.name,
      version: record.version,
      description: record.description,
      source: record.source,
      path: record.path,
      manifest: this.engine.jsonText(JSON.stringify(record.manifest)),
      installed_at: this.engine.time(record.installedAt),
    };
    const { name: _, ...rest } = row;
    await this.db
      .insertInto("plugins")
      .values(row)
      .onConflict((oc) => oc.column("name").doUpdateSet(rest))
      .execute();
  }

  async getPlugin(name: string): Promise<PluginRecord | undefined> {
    const row = await this.db.selectFrom("plugins").selectAll().where("name", "=", name).executeTakeFirst();
    return row ? toPlugin(row) : undefined;
  }

  async listPlugins(): Promise<PluginRecord[]> {
    return (await this.db.selectFrom("plugins").selectAll().orderBy("name").execute()).map(toPlugin);
  }

  async publishAgentVersion(version: NewAgentVersion): Promise<PublishResult> {
    const { row, published } = await publishVersion(this.db, this.engine, {
      table: "agent_versions",
      row: {
        name: version.name,
        content_hash: version.contentHash,
        plugin: version.plugin,
        plugin_version: version.pluginVersion,
        plugin_path: version.pluginPath,
        definition: this.engine.jsonText(JSON.stringify(version.definition)),
        instructions: version.instructions,
        harness: this.engine.jsonText(JSON.stringify(version.harness)),
      },
      ...(this.versionLock ? { lock: this.versionLock } : {}),
    });
    return { record: toAgent(row), published };
  }

  async getAgentVersion(name: string, version?: number): Promise<AgentVersionRecord | undefined> {
    const row = await getVersionRow(this.db, this.engine, "agent_versions", name, version);
    return row ? toAgent(row) : undefined;
  }

  async listAgents(): Promise<AgentVersionRecord[]> {
    return (await latestVersionRows(this.db, "agent_versions")).map(toAgent);
  }

  async listAgentVersions(name: string): Promise<AgentVersionRecord[]> {
    const rows = await this.db
      .selectFrom("agent_versions")
      .selectAll()
      .where("name", "=", name)
      .orderBy("version")
      .execute();
    return rows.map(toAgent);
  }

  async createJob(job: JobRecord, first: JobCreation = {}): Promise<JobEvent[]> {
    const events = first.events ?? [];
    const lifecycle = first.lifecycle ?? [];
    if (events.length === 0 && lifecycle.length === 0) {
      await HOT_QUERIES.createJob.execute(this.db, this.engine, { row: jobColumns(this.engine, job) });
      return [];
    }
    // The job, its first events and the lifecycle events reporting it in one transaction (issue 24: it was an
    // insert and then an append): a job exists with its first events or not at all.
    return this.#jobWrite(job.id, async (trx) => {
      const row = { ...jobColumns(this.engine, job), last_seq: job.lastSeq + events.length };
      await HOT_QUERIES.createJob.execute(trx, this.engine, { row });
      const stored = await this.#insertEvents(trx, job.id, job.lastSeq, events, job.createdAt);
      await this.#keepLifecycle(trx, lifecycle);
      if (stored.length > 0) await this.afterAppend(trx, job.id, job.lastSeq + 1, job.lastSeq + stored.length);
      return stored;
    });
  }

  async getJob(id: string): Promise<JobRecord | undefined> {
    const [row] = (await HOT_QUERIES.getJob.execute(this.db, this.engine, { id })).rows;
    return row ? toJob(row) : undefined;
  }

  async listJobs(query: ListJobsQuery = {}): Promise<JobRecord[]> {
    const ord = sql.ref(this.engine.insertionOrder);
    const rows = await this.db
      .selectFrom("jobs")
      .selectAll()
      .$if(Boolean(query.state), (q) => q.where("state", "=", query.state!))
      .$if(Boolean(query.agent), (q) => q.where("agent_name", "=", query.agent!))
      // %, _ and \ in the text are matched as themselves; any case (SQLite's LIKE ignores ASCII case, PostgreSQL's ILIKE any).
      .$if(Boolean(query.text), (q) =>
        q.where((eb) =>
          eb.or([
            eb("id", "=", query.text!),
            sql<boolean>`input ${sql.raw(this.engine.caseInsensitiveLike)} ${`%${likeEscaped(query.text!)}%`} ESCAPE '\\'`,
          ]),
        ),
      )
      // The next page: jobs after the given one in the list's order (creation time, then insertion).
      .$if(Boolean(query.after), (q) =>
        q.where(sql<boolean>`(created_at, ${ord}) < (SELECT created_at, ${ord} FROM jobs WHERE id = ${query.after!})`),
      )
      .orderBy("created_at", "desc")
      .orderBy(ord, "desc")
      .limit(query.limit ?? 50)
      .execute();
    return rows.map(toJob);
  }

  async #updateJob(db: Db | Trx, id: string, patch: JobPatch): Promise<JobRecord> {
    const columns = jobPatchColumns(this.engine, patch);
    const [row] = Object.keys(columns).length
      ? (await HOT_QUERIES.updateJobReturning.execute(db, this.engine, { id, columns })).rows
      : (await HOT_QUERIES.getJob.execute(db, this.engine, { id })).rows;
    if (!row) throw jobNotFound(id);
    return toJob(row);
  }

  async updateJob(id: string, patch: JobPatch): Promise<JobRecord> {
    return this.#jobWrite(id, async (trx) => {
      const updated = await this.#updateJob(trx, id, { ...patch, updatedAt: patch.updatedAt ?? new Date() });
      if (patch.cancelRequestedAt) await this.afterCancelRequested(trx, id);
      return updated;
    });
  }

  /** `write` in a transaction that first passes beforeJobWrite (a fence, on PostgreSQL). */
  #jobWrite<T>(jobId: string, write: (trx: Trx) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(async (trx) => {
      await this.beforeJobWrite(trx, jobId);
      return write(trx);
    });
  }

  async append(change: JobAppend): Promise<JobEvent[]> {
    const { jobId } = change;
    return this.#jobWrite(jobId, async (trx) => {
      const now = new Date();
      // One statement reserves the events' numbers and sets the job's columns (it read the row, then wrote it).
      const [numbered] = (
        await HOT_QUERIES.numberEvents.execute(trx, this.engine, {
          id: jobId,
          count: change.events.length,
          columns: { updated_at: this.engine.time(now), ...jobPatchColumns(this.engine, change.job ?? {}) },
        })
      ).rows;
      if (!numbered) throw notFound(`job ${jobId} not found`);
      const seq = toNumber(numbered.last_seq);
      const stored = await this.#insertEvents(trx, jobId, seq - change.events.length, change.events, now);
      for (const permission of change.permissions ?? []) {
        const decided = permission.status !== "pending";
        if (decided) await this.beforeDecision(trx, permission);
        await this.#upsertPermission(trx, permission);
        if (decided) await this.afterDecision(trx, permission);
      }
      await this.#keepLifecycle(trx, change.lifecycle ?? []);
      if (change.stderr) await this.#appendStderr(trx, jobId, change.stderr);
      if (stored.length > 0) await this.afterAppend(trx, jobId, seq - stored.length + 1, seq);
      if (change.job?.cancelRequestedAt) await this.afterCancelRequested(trx, jobId);
      return stored;
    });
  }

  /** `events` stored as the job's next after `afterSeq`, numbered from there; an event without a time gets `now`. */
  async #insertEvents(trx: Trx, jobId: string, afterSeq: number, events: JobEvent[], now: Date): Promise<JobEvent[]> {
    let seq = afterSeq;
    const stored = events.map((event) =>
      create(JobEventSchema, { ...event, jobId, seq: BigInt(++seq), time: event.time ?? timestampFromDate(now) }),
    );
    // One INSERT for a step (a statement per event would dominate a busy job), of at most ROWS_PER_INSERT rows.
    for (const rows of inParts(stored, ROWS_PER_INSERT))
      await HOT_QUERIES.insertJobEvents.execute(trx, this.engine, {
        rows: rows.map((e) => ({
          job_id: jobId,
          seq: Number(e.seq),
          time: this.engine.time(now),
          event: this.engine.jsonText(eventJson(e)),
        })),
      });
    return stored;
  }

  async #appendStderr(trx: Trx, jobId: string, { sessionId, piece, maxBytes }: StderrAppend): Promise<void> {
    // The session's row (created first when missing, so sessions list in the order they first wrote), locked on
    // PostgreSQL: its bookkeeping and its pieces change together.
    await trx
      .insertInto("session_stderr")
      .values({
        job_id: jobId,
        session_id: sessionId,
        last_seq: 0,
        kept_bytes: 0,
        dropped_bytes: 0,
        trailing_dropped_bytes: 0,
      })
      .onConflict((oc) => oc.columns(["job_id", "session_id"]).doNothing())
      .execute();
    const row = await trx
      .selectFrom("session_stderr")
      .select(["last_seq", "kept_bytes", "dropped_bytes", "trailing_dropped_bytes"])
      .where("job_id", "=", jobId)
      .where("session_id", "=", sessionId)
      .$if(this.engine.rowLocks, (q) => q.forUpdate())
      .executeTakeFirstOrThrow();
    if (piece.seq <= toNumber(row.last_seq)) return;
    const session = {
      kept: toNumber(row.kept_bytes),
      dropped: toNumber(row.dropped_bytes),
      trailing: toNumber(row.trailing_dropped_bytes),
    };
    const kept = keptPiece(piece, maxBytes);
    if (kept.text === "") {
      // Nothing to keep: the bytes are dropped after the last piece kept.
      session.trailing += kept.droppedBytes;
    } else {
      await trx
        .insertInto("stderr_pieces")
        .values({
          job_id: jobId,
          session_id: sessionId,
          seq: piece.seq,
          text: kept.text,
          bytes: kept.bytes,
          dropped_bytes: kept.droppedBytes + session.trailing,
        })
        .execute();
      session.trailing = 0;
      session.kept += kept.bytes;
      if (session.kept > maxBytes) {
        // The oldest pieces go, as few as bring the session back under its allowance (the newest always stays):
        // those with more than maxBytes in themselves and the pieces after them.
        const gone = await trx
          .selectFrom((eb) =>
            eb
              .selectFrom("stderr_pieces")
              .select(["seq", "bytes", "dropped_bytes", sql<number>`sum(bytes) OVER (ORDER BY seq DESC)`.as("newer")])
              .where("job_id", "=", jobId)
              .where("session_id", "=", sessionId)
              .as("w"),
          )
          .select(["seq", "bytes", "dropped_bytes"])
          .where("newer", ">", maxBytes)
          .where("seq", "<>", piece.seq)
          .execute();
        if (gone.length > 0) {
          await trx
            .deleteFrom("stderr_pieces")
            .where("job_id", "=", jobId)
            .where("session_id", "=", sessionId)
            .where(
              "seq",
              "in",
              gone.map((old) => toNumber(old.seq)),
            )
            .execute();
        }
        for (const old of gone) {
          session.kept -= old.bytes;
          session.dropped += toNumber(old.dropped_bytes) + old.bytes;
        }
      }
    }
    await trx
      .updateTable("session_stderr")
      .set({
        last_seq: piece.seq,
        kept_bytes: session.kept,
        dropped_bytes: session.dropped,
        trailing_dropped_bytes: session.trailing,
      })
      .where("job_id", "=", jobId)
      .where("session_id", "=", sessionId)
      .execute();
  }

  async listStderrSessions(jobId: string): Promise<SessionStderr[]> {
    const rows = await this.db
      .selectFrom("session_stderr")
      .select(["session_id", "kept_bytes", "dropped_bytes", "trailing_dropped_bytes"])
      .where("job_id", "=", jobId)
      .orderBy(sql.ref(this.engine.insertionOrder))
      .execute();
    return rows.map((r) => ({
      sessionId: r.session_id,
      keptBytes: toNumber(r.kept_bytes),
      droppedBytes: toNumber(r.dropped_bytes),
      trailingDroppedBytes: toNumber(r.trailing_dropped_bytes),
    }));
  }

  async listStderrPieces(jobId: string, sessionId: string, afterSeq: number, limit = 1000): Promise<StderrPiece[]> {
    const rows = await this.db
      .selectFrom("stderr_pieces")
      .select(["seq", "text", "dropped_bytes"])
      .where("job_id", "=", jobId)
      .where("session_id", "=", sessionId)
      .where("seq", ">", afterSeq)
      .orderBy("seq")
      .limit(limit)
      .execute();
    return rows.map((r) => ({ seq: toNumber(r.seq), text: r.text, droppedBytes: toNumber(r.dropped_bytes) }));
  }

  async #keepLifecycle(db: Db | Trx, events: RawEvent[]): Promise<void> {
    for (const part of inParts(events, ROWS_PER_INSERT))
      await HOT_QUERIES.keepLifecycle.execute(db, this.engine, {
        events: part.map((e) => toJsonString(RawEventSchema, e)),
      });
  }

  async putLifecycleEvents(events: RawEvent[]): Promise<void> {
    await this.#keepLifecycle(this.db, events);
  }

  async recordSessionToken(tokenId: string, jobId: string): Promise<void> {
    const fresh = { job_id: jobId, revoke_asked: this.engine.bool(false), claimed_until: null };
    await this.db
      .insertInto("session_tokens")
      .values({ token_id: tokenId, ...fresh })
      // The same session minted again (a job started again under its session id): kept for the new token.
      .onConflict((oc) => oc.column("token_id").doUpdateSet(fresh))
      .execute();
  }

  async markSessionTokenRevokeAsked(tokenId: string): Promise<void> {
    await this.db
      .insertInto("session_tokens")
      .values({ token_id: tokenId, job_id: "", revoke_asked: this.engine.bool(true), claimed_until: null })
      .onConflict((oc) => oc.column("token_id").doUpdateSet({ revoke_asked: this.engine.bool(true) }))
      .execute();
  }

  async forgetSessionToken(tokenId: string): Promise<void> {
    await this.db.deleteFrom("session_tokens").where("token_id", "=", tokenId).execute();
  }

  // One statement finds the due, unclaimed tokens and claims them; PostgreSQL's store claims with SKIP LOCKED.
  async claimSessionTokensToRevoke(options: { limit: number; claimMs: number }): Promise<string[]> {
    const now = Date.now();
    const rows = await this.db
      .updateTable("session_tokens")
      .set({ claimed_until: this.engine.time(new Date(now + options.claimMs)) })
      .where("token_id", "in", (eb) =>
        eb
          .selectFrom("session_tokens")
          .leftJoin("jobs", "jobs.id", "session_tokens.job_id")
          .select("session_tokens.token_id")
          .where((w) =>
            w.and([
              w.or([
                w("session_tokens.revoke_asked", "=", this.engine.bool(true)),
                w("jobs.state", "not in", [...ACTIVE_JOB_STATES]),
              ]),
              w.or([
                w("session_tokens.claimed_until", "is", null),
                w("session_tokens.claimed_until", "<", this.engine.time(new Date(now))),
              ]),
            ]),
          )
          .limit(options.limit),
      )
      .returning("token_id")
      .execute();
    return rows.map((r) => r.token_id);
  }

  async releaseSessionTokens(tokenIds: string[]): Promise<void> {
    if (tokenIds.length === 0) return;
    await this.db
      .updateTable("session_tokens")
      .set({ claimed_until: null })
      .where("token_id", "in", tokenIds)
      .execute();
  }

  async claimLifecycleEvents(options: { limit: number; claimMs: number }): Promise<StoredLifecycleEvent[]> {
    const now = Date.now();
    const { rows } = await HOT_QUERIES.claimUnclaimedLifecycle.execute(this.db, this.engine, {
      now: this.engine.time(new Date(now)),
      until: this.engine.time(new Date(now + options.claimMs)),
      limit: options.limit,
    });
    return storedLifecycleEvents(rows.map((r) => ({ seq: toNumber(r.seq), json: r.event })));
  }

  async deleteLifecycleEvents(seqs: number[]): Promise<void> {
    if (seqs.length === 0) return;
    await HOT_QUERIES.deleteLifecycle.execute(this.db, this.engine, { seqs });
  }

  async releaseLifecycleEvents(seqs: number[]): Promise<void> {
    if (seqs.length === 0) return;
    await HOT_QUERIES.claimLifecycle.execute(this.db, this.engine, { seqs, until: null });
  }

  async listJobEvents(jobId: string, afterSeq: number, limit = 1000): Promise<JobEvent[]> {
    const { rows } = await HOT_QUERIES.listJobEvents.execute(this.db, this.engine, { jobId, afterSeq, limit });
    return rows.map((r) => toEvent(r.event));
  }

  async #upsertPermission(trx: Trx, p: PermissionRecord): Promise<void> {
    await HOT_QUERIES.upsertPermission.execute(trx, this.engine, { row: permissionColumns(this.engine, p) });
  }

  async getPermission(jobId: string, id: string): Promise<PermissionRecord | undefined> {
    // By request id first, else by the tool call id.
    const row = await this.db
      .selectFrom("permissions")
      .selectAll()
      .where("job_id", "=", jobId)
      .where((eb) => eb.or([eb("id", "=", id), eb("call_id", "=", id)]))
      .orderBy(sql`id = ${id}`, "desc")
      .limit(1)
      .executeTakeFirst();
    return row ? toPermission(row) : undefined;
  }

  async listPermissions(query: ListPermissionsQuery): Promise<PermissionRecord[]> {
    const { rows } = await HOT_QUERIES.listPermissions.execute(this.db, this.engine, {
      ...(query.jobId ? { jobId: query.jobId } : {}),
      ...(query.approvalsOnly ? { needsPerson: this.engine.bool(true) } : {}),
      ...(query.pendingOnly ? { pending: "pending" } : {}),
      ...(query.undeliveredOnly ? { delivered: this.engine.bool(false) } : {}),
      ...(query.after ? { after: query.after } : {}),
      ...(query.limit !== undefined ? { limit: query.limit } : {}),
    });
    return rows.map(toPermission);
  }

  async markPermissionDelivered(jobId: string, id: string): Promise<void> {
    await HOT_QUERIES.markPermissionDelivered.execute(this.db, this.engine, {
      jobId,
      id,
      delivered: this.engine.bool(true),
    });
  }

  async runtimeCallPermits(query: {
    jobId: string;
    tool: string;
    callId: string;
    limit: number;
  }): Promise<PermissionRecord[]> {
    const { rows } = await HOT_QUERIES.runtimeCallPermits.execute(this.db, this.engine, { ...query, none: "" });
    return rows.map(toPermission);
  }

  async usePermissionForRuntimeCall(jobId: string, id: string, callId: string): Promise<boolean> {
    const result = await HOT_QUERIES.usePermissionForRuntimeCall.execute(this.db, this.engine, {
      jobId,
      id,
      callId,
      none: "",
    });
    return Number(result.numAffectedRows ?? 0) > 0;
  }

  async putOperationCheckpoint(record: OperationCheckpoint): Promise<void> {
    // A job write like the others: on PostgreSQL a replica that lost the job's lease must not record its operations.
    await this.#jobWrite(record.jobId, async (trx) => {
      const row = {
        job_id: record.jobId,
        call_id: record.callId,
        record: this.engine.jsonText(JSON.stringify(record)),
        delivered: this.engine.bool(record.delivered),
      };
      await trx
        .insertInto("operation_checkpoints")
        .values(row)
        .onConflict((oc) =>
          oc.columns(["job_id", "call_id"]).doUpdateSet({ record: row.record, delivered: row.delivered }),
        )
        .execute();
    });
  }

  async getOperationCheckpoint(jobId: string, callId: string): Promise<OperationCheckpoint | undefined> {
    const row = await this.db
      .selectFrom("operation_checkpoints")
      .select("record")
      .where("job_id", "=", jobId)
      .where("call_id", "=", callId)
      .executeTakeFirst();
    return row ? (fromJson(row.record) as OperationCheckpoint) : undefined;
  }

  async listOperationCheckpoints(jobId: string): Promise<OperationCheckpoint[]> {
    const rows = await this.db
      .selectFrom("operation_checkpoints")
      .select("record")
      .where("job_id", "=", jobId)
      .orderBy("call_id")
      .execute();
    return rows.map((r) => fromJson(r.record) as OperationCheckpoint);
  }

  async close(): Promise<void> {}
}

/** The event as stored: its JSON. A session's number JSON cannot write (Infinity, NaN in a tool's input) fails it for good. */
function eventJson(event: JobEvent): string {
  try {
    return toJsonString(JobEventSchema, event);
  } catch (error) {
    throw new UnstorableValueError(
      `event ${event.seq} (${event.event.case ?? "empty"}) cannot be written as JSON: ${(error as Error).message}`,
    );
  }
}
