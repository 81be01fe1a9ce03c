// The JobStore on SQLite (better-sqlite3): the embedded default, one file
// under the data directory. Every multi-row change is one transaction.
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { publishSqliteVersion } from "./sqlite-versions.js";
import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { RawEventSchema, type RawEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { JobEventSchema, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type {
  AgentVersionRecord,
  JobAppend,
  JobPatch,
  JobRecord,
  JobStateName,
  JobStore,
  JsonObject,
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
import { notFound } from "../orchestrator-error.js";

const SCHEMA = `
CREATE TABLE IF NOT EXISTS plugins (
  name TEXT PRIMARY KEY, version TEXT NOT NULL, description TEXT NOT NULL, source TEXT NOT NULL,
  path TEXT NOT NULL, manifest TEXT NOT NULL, installed_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS agent_versions (
  name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL, plugin TEXT NOT NULL,
  plugin_version TEXT NOT NULL, plugin_path TEXT NOT NULL, definition TEXT NOT NULL, instructions TEXT NOT NULL,
  harness TEXT NOT NULL, published_at INTEGER NOT NULL, PRIMARY KEY (name, version));
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY, agent_name TEXT NOT NULL, agent_version INTEGER NOT NULL, input TEXT NOT NULL,
  state TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER,
  result_text TEXT NOT NULL, stop_reason INTEGER NOT NULL, error TEXT NOT NULL, session_id TEXT NOT NULL,
  sandbox_url TEXT NOT NULL, last_seq INTEGER NOT NULL, sandbox_seq INTEGER NOT NULL, attachments TEXT NOT NULL,
  token_id TEXT NOT NULL, cancel_requested_at INTEGER, served_tools TEXT NOT NULL DEFAULT '',
  started_by TEXT NOT NULL DEFAULT '', started_at INTEGER, trace_id TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs (state);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at);
CREATE TABLE IF NOT EXISTS job_events (
  job_id TEXT NOT NULL, seq INTEGER NOT NULL, time INTEGER NOT NULL, event TEXT NOT NULL,
  PRIMARY KEY (job_id, seq));
CREATE TABLE IF NOT EXISTS permissions (
  job_id TEXT NOT NULL, id TEXT NOT NULL, call_id TEXT NOT NULL, session_id TEXT NOT NULL, tool TEXT NOT NULL,
  input TEXT, title TEXT NOT NULL, needs_person INTEGER NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL,
  decider TEXT, answered_by TEXT NOT NULL, answer_input TEXT, requested_at INTEGER NOT NULL, answered_at INTEGER,
  delivered INTEGER NOT NULL, PRIMARY KEY (job_id, id));
CREATE INDEX IF NOT EXISTS permissions_by_status ON permissions (status);
CREATE TABLE IF NOT EXISTS operation_checkpoints (
  job_id TEXT NOT NULL, call_id TEXT NOT NULL, record TEXT NOT NULL, delivered INTEGER NOT NULL,
  PRIMARY KEY (job_id, call_id));
CREATE TABLE IF NOT EXISTS lifecycle_outbox (seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, claimed_until INTEGER);
CREATE TABLE IF NOT EXISTS session_stderr (
  job_id TEXT NOT NULL, session_id TEXT NOT NULL, last_seq INTEGER NOT NULL, kept_bytes INTEGER NOT NULL,
  dropped_bytes INTEGER NOT NULL, trailing_dropped_bytes INTEGER NOT NULL, PRIMARY KEY (job_id, session_id));
CREATE TABLE IF NOT EXISTS stderr_pieces (
  job_id TEXT NOT NULL, session_id TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, bytes INTEGER NOT NULL,
  dropped_bytes INTEGER NOT NULL, PRIMARY KEY (job_id, session_id, seq));
`;

interface JobRow {
  id: string;
  agent_name: string;
  agent_version: number;
  input: string;
  state: string;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
  result_text: string;
  stop_reason: number;
  error: string;
  session_id: string;
  sandbox_url: string;
  last_seq: number;
  sandbox_seq: number;
  attachments: string;
  token_id: string;
  cancel_requested_at: number | null;
  served_tools: string;
  started_by: string;
  started_at: number | null;
  trace_id: string;
}

interface AgentRow {
  name: string;
  version: number;
  content_hash: string;
  plugin: string;
  plugin_version: string;
  plugin_path: string;
  definition: string;
  instructions: string;
  harness: string;
  published_at: number;
}

interface PermissionRow {
  job_id: string;
  id: string;
  call_id: string;
  session_id: string;
  tool: string;
  input: string | null;
  title: string;
  needs_person: number;
  status: string;
  reason: string;
  decider: string | null;
  answered_by: string;
  answer_input: string | null;
  requested_at: number;
  answered_at: number | null;
  delivered: number;
}

const JOB_COLUMNS: Record<keyof JobPatch, string> = {
  agentName: "agent_name",
  agentVersion: "agent_version",
  input: "input",
  state: "state",
  updatedAt: "updated_at",
  finishedAt: "finished_at",
  resultText: "result_text",
  stopReason: "stop_reason",
  error: "error",
  sessionId: "session_id",
  sandboxUrl: "sandbox_url",
  sandboxSeq: "sandbox_seq",
  attachments: "attachments",
  tokenId: "token_id",
  cancelRequestedAt: "cancel_requested_at",
  servedTools: "served_tools",
  startedBy: "started_by",
  startedAt: "started_at",
  traceId: "trace_id",
};

function toJob(row: JobRow): JobRecord {
  return {
    id: row.id,
    agentName: row.agent_name,
    agentVersion: row.agent_version,
    input: row.input,
    state: row.state as JobStateName,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
    ...(row.finished_at !== null ? { finishedAt: new Date(row.finished_at) } : {}),
    resultText: row.result_text,
    stopReason: row.stop_reason,
    error: row.error,
    sessionId: row.session_id,
    sandboxUrl: row.sandbox_url,
    lastSeq: row.last_seq,
    sandboxSeq: row.sandbox_seq,
    attachments: JSON.parse(row.attachments) as string[],
    tokenId: row.token_id,
    ...(row.cancel_requested_at !== null ? { cancelRequestedAt: new Date(row.cancel_requested_at) } : {}),
    servedTools: row.served_tools,
    startedBy: row.started_by,
    ...(row.started_at !== null ? { startedAt: new Date(row.started_at) } : {}),
    ...(row.trace_id ? { traceId: row.trace_id } : {}),
  };
}

function toAgent(row: AgentRow): AgentVersionRecord {
  return {
    name: row.name,
    version: row.version,
    contentHash: row.content_hash,
    plugin: row.plugin,
    pluginVersion: row.plugin_version,
    pluginPath: row.plugin_path,
    definition: JSON.parse(row.definition) as AgentVersionRecord["definition"],
    instructions: row.instructions,
    harness: JSON.parse(row.harness) as AgentVersionRecord["harness"],
    publishedAt: new Date(row.published_at),
  };
}

function toPermission(row: PermissionRow): PermissionRecord {
  return {
    jobId: row.job_id,
    id: row.id,
    callId: row.call_id,
    sessionId: row.session_id,
    tool: row.tool,
    ...(row.input !== null ? { input: JSON.parse(row.input) as JsonObject } : {}),
    title: row.title,
    needsPerson: row.needs_person === 1,
    status: row.status as PermissionRecord["status"],
    reason: row.reason,
    ...(row.decider !== null ? { decider: row.decider as PermissionRecord["decider"] } : {}),
    answeredBy: row.answered_by,
    ...(row.answer_input !== null ? { answerInput: JSON.parse(row.answer_input) as JsonObject } : {}),
    requestedAt: new Date(row.requested_at),
    ...(row.answered_at !== null ? { answeredAt: new Date(row.answered_at) } : {}),
    delivered: row.delivered === 1,
  };
}

function patchValue(key: keyof JobPatch, value: unknown): unknown {
  if (value instanceof Date) return value.getTime();
  if (key === "attachments") return JSON.stringify(value);
  return value ?? null;
}

export class SqliteJobStore implements JobStore {
  readonly #db: Database.Database;

  constructor(options: { file: string }) {
    if (options.file !== ":memory:") mkdirSync(path.dirname(options.file), { recursive: true });
    this.#db = new Database(options.file);
    this.#db.pragma("journal_mode = WAL");
    this.#db.pragma("synchronous = NORMAL");
    this.#db.pragma("busy_timeout = 5000");
    this.#db.exec(SCHEMA);
    // A data directory from before served tools: its jobs have none.
    const columns = this.#db.prepare("PRAGMA table_info(jobs)").all() as { name: string }[];
    if (!columns.some((c) => c.name === "served_tools"))
      this.#db.exec("ALTER TABLE jobs ADD COLUMN served_tools TEXT NOT NULL DEFAULT ''");
    // ... and from before identities: nobody is recorded as their starter.
    if (!columns.some((c) => c.name === "started_by"))
      this.#db.exec("ALTER TABLE jobs ADD COLUMN started_by TEXT NOT NULL DEFAULT ''");
    // ... and from before `oz0 jobs show` named when a job started and its trace.
    if (!columns.some((c) => c.name === "started_at")) this.#db.exec("ALTER TABLE jobs ADD COLUMN started_at INTEGER");
    if (!columns.some((c) => c.name === "trace_id"))
      this.#db.exec("ALTER TABLE jobs ADD COLUMN trace_id TEXT NOT NULL DEFAULT ''");
  }

  async putPlugin(record: PluginRecord): Promise<void> {
    this.#db
      .prepare(
        `INSERT INTO plugins (name, version, description, source, path, manifest, installed_at) VALUES (?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET version = excluded.version, description = excluded.description, source = excluded.source,
         path = excluded.path, manifest = excluded.manifest, installed_at = excluded.installed_at`,
      )
      .run(
        record.name,
        record.version,
        record.description,
        record.source,
        record.path,
        JSON.stringify(record.manifest),
        record.installedAt.getTime(),
      );
  }

  async getPlugin(name: string): Promise<PluginRecord | undefined> {
    const row = this.#db.prepare("SELECT * FROM plugins WHERE name = ?").get(name) as
      Record<string, unknown> | undefined;
    return row ? this.#toPlugin(row) : undefined;
  }

  async listPlugins(): Promise<PluginRecord[]> {
    const rows = this.#db.prepare("SELECT * FROM plugins ORDER BY name").all() as Record<string, unknown>[];
    return rows.map((row) => this.#toPlugin(row));
  }

  #toPlugin(row: Record<string, unknown>): PluginRecord {
    return {
      name: row.name as string,
      version: row.version as string,
      description: row.description as string,
      source: row.source as string,
      path: row.path as string,
      manifest: JSON.parse(row.manifest as string) as PluginRecord["manifest"],
      installedAt: new Date(row.installed_at as number),
    };
  }

  async publishAgentVersion(version: NewAgentVersion): Promise<PublishResult> {
    const { row, published } = publishSqliteVersion<AgentRow>(this.#db, {
      table: "agent_versions",
      row: { name: version.name, content_hash: version.contentHash, ...agentVersionColumns(version) },
    });
    return { record: toAgent(row), published };
  }

  async getAgentVersion(name: string, version?: number): Promise<AgentVersionRecord | undefined> {
    const row = (
      version
        ? this.#db.prepare("SELECT * FROM agent_versions WHERE name = ? AND version = ?").get(name, version)
        : this.#db.prepare("SELECT * FROM agent_versions WHERE name = ? ORDER BY version DESC LIMIT 1").get(name)
    ) as AgentRow | undefined;
    return row ? toAgent(row) : undefined;
  }

  async listAgents(): Promise<AgentVersionRecord[]> {
    const rows = this.#db
      .prepare(
        `SELECT a.* FROM agent_versions a JOIN (SELECT name, MAX(version) AS v FROM agent_versions GROUP BY name) m
         ON a.name = m.name AND a.version = m.v ORDER BY a.name`,
      )
      .all() as AgentRow[];
    return rows.map(toAgent);
  }

  async listAgentVersions(name: string): Promise<AgentVersionRecord[]> {
    const rows = this.#db
      .prepare("SELECT * FROM agent_versions WHERE name = ? ORDER BY version")
      .all(name) as AgentRow[];
    return rows.map(toAgent);
  }

  async createJob(job: JobRecord): Promise<void> {
    this.#db
      .prepare(
        `INSERT INTO jobs (id, agent_name, agent_version, input, state, created_at, updated_at, finished_at, result_text, stop_reason,
         error, session_id, sandbox_url, last_seq, sandbox_seq, attachments, token_id, cancel_requested_at, served_tools, started_by, started_at, trace_id)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      )
      .run(
        job.id,
        job.agentName,
        job.agentVersion,
        job.input,
        job.state,
        job.createdAt.getTime(),
        job.updatedAt.getTime(),
        job.finishedAt?.getTime() ?? null,
        job.resultText,
        job.stopReason,
        job.error,
        job.sessionId,
        job.sandboxUrl,
        job.lastSeq,
        job.sandboxSeq,
        JSON.stringify(job.attachments),
        job.tokenId,
        job.cancelRequestedAt?.getTime() ?? null,
        job.servedTools,
        job.startedBy,
        job.startedAt?.getTime() ?? null,
        job.traceId ?? "",
      );
  }

  async getJob(id: string): Promise<JobRecord | undefined> {
    const row = this.#db.prepare("SELECT * FROM jobs WHERE id = ?").get(id) as JobRow | undefined;
    return row ? toJob(row) : undefined;
  }

  async listJobs(query: ListJobsQuery = {}): Promise<JobRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (query.state) {
      where.push("state = ?");
      args.push(query.state);
    }
    if (query.agent) {
      where.push("agent_name = ?");
      args.push(query.agent);
    }
    if (query.text) {
      // LIKE ignores the case of ASCII letters; %, _ and \ in the text are matched as themselves.
      where.push("(id = ? OR input LIKE ? ESCAPE '\\')");
      args.push(query.text, `%${likeEscaped(query.text)}%`);
    }
    if (query.after) {
      where.push("(created_at, rowid) < (SELECT created_at, rowid FROM jobs WHERE id = ?)");
      args.push(query.after);
    }
    const sql = `SELECT * FROM jobs ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY created_at DESC, rowid DESC LIMIT ?`;
    const rows = this.#db.prepare(sql).all(...args, query.limit ?? 50) as JobRow[];
    return rows.map(toJob);
  }

  #updateJob(id: string, patch: JobPatch): JobRecord {
    const keys = (Object.keys(patch) as (keyof JobPatch)[]).filter((k) => k in JOB_COLUMNS);
    if (keys.length > 0) {
      const sets = keys.map((k) => `${JOB_COLUMNS[k]} = ?`).join(", ");
      const info = this.#db
        .prepare(`UPDATE jobs SET ${sets} WHERE id = ?`)
        .run(...keys.map((k) => patchValue(k, patch[k])), id);
      if (info.changes === 0) throw notFound(`job ${id} not found; list jobs with \`oz0 jobs list\``);
    }
    const row = this.#db.prepare("SELECT * FROM jobs WHERE id = ?").get(id) as JobRow | undefined;
    if (!row) throw notFound(`job ${id} not found; list jobs with \`oz0 jobs list\``);
    return toJob(row);
  }

  async updateJob(id: string, patch: JobPatch): Promise<JobRecord> {
    return this.#db.transaction(() => this.#updateJob(id, { ...patch, updatedAt: patch.updatedAt ?? new Date() }))();
  }

  async append(change: JobAppend): Promise<JobEvent[]> {
    return this.#db.transaction((): JobEvent[] => {
      const row = this.#db.prepare("SELECT last_seq FROM jobs WHERE id = ?").get(change.jobId) as
        { last_seq: number } | undefined;
      if (!row) throw notFound(`job ${change.jobId} not found`);
      let seq = row.last_seq;
      const insert = this.#db.prepare("INSERT INTO job_events (job_id, seq, time, event) VALUES (?, ?, ?, ?)");
      const stored: JobEvent[] = [];
      for (const event of change.events) {
        seq += 1;
        const withSeq = create(JobEventSchema, {
          ...event,
          jobId: change.jobId,
          seq: BigInt(seq),
          time: event.time ?? timestampFromDate(new Date()),
        });
        insert.run(change.jobId, seq, Date.now(), toJsonString(JobEventSchema, withSeq));
        stored.push(withSeq);
      }
      this.#db.prepare("UPDATE jobs SET last_seq = ?, updated_at = ? WHERE id = ?").run(seq, Date.now(), change.jobId);
      if (change.job) this.#updateJob(change.jobId, change.job);
      for (const permission of change.permissions ?? []) this.#upsertPermission(permission);
      this.#keepLifecycle(change.lifecycle ?? []);
      if (change.stderr) this.#appendStderr(change.jobId, change.stderr);
      return stored;
    })();
  }

  #appendStderr(jobId: string, { sessionId, piece, maxBytes }: StderrAppend): void {
    const row = this.#db
      .prepare(
        "SELECT last_seq, kept_bytes, dropped_bytes, trailing_dropped_bytes FROM session_stderr WHERE job_id = ? AND session_id = ?",
      )
      .get(jobId, sessionId) as
      { last_seq: number; kept_bytes: number; dropped_bytes: number; trailing_dropped_bytes: number } | undefined;
    if (row && piece.seq <= row.last_seq) return;
    const session = {
      kept: row?.kept_bytes ?? 0,
      dropped: row?.dropped_bytes ?? 0,
      trailing: row?.trailing_dropped_bytes ?? 0,
    };
    const kept = keptPiece(piece, maxBytes);
    if (kept.text === "") {
      // Nothing to keep: the bytes are dropped after the last piece kept.
      session.trailing += kept.droppedBytes;
    } else {
      this.#db
        .prepare(
          "INSERT INTO stderr_pieces (job_id, session_id, seq, text, bytes, dropped_bytes) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .run(jobId, sessionId, piece.seq, kept.text, kept.bytes, kept.droppedBytes + session.trailing);
      session.trailing = 0;
      session.kept += kept.bytes;
      const oldest = this.#db.prepare(
        "SELECT seq, bytes, dropped_bytes FROM stderr_pieces WHERE job_id = ? AND session_id = ? ORDER BY seq LIMIT 1",
      );
      const remove = this.#db.prepare("DELETE FROM stderr_pieces WHERE job_id = ? AND session_id = ? AND seq = ?");
      while (session.kept > maxBytes) {
        const first = oldest.get(jobId, sessionId) as { seq: number; bytes: number; dropped_bytes: number };
        remove.run(jobId, sessionId, first.seq);
        session.kept -= first.bytes;
        session.dropped += first.dropped_bytes + first.bytes;
      }
    }
    this.#db
      .prepare(
        `INSERT INTO session_stderr (job_id, session_id, last_seq, kept_bytes, dropped_bytes, trailing_dropped_bytes) VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (job_id, session_id) DO UPDATE SET last_seq = excluded.last_seq, kept_bytes = excluded.kept_bytes,
         dropped_bytes = excluded.dropped_bytes, trailing_dropped_bytes = excluded.trailing_dropped_bytes`,
      )
      .run(jobId, sessionId, piece.seq, session.kept, session.dropped, session.trailing);
  }

  async listStderrSessions(jobId: string): Promise<SessionStderr[]> {
    const rows = this.#db
      .prepare(
        "SELECT session_id, kept_bytes, dropped_bytes, trailing_dropped_bytes FROM session_stderr WHERE job_id = ? ORDER BY rowid",
      )
      .all(jobId) as {
      session_id: string;
      kept_bytes: number;
      dropped_bytes: number;
      trailing_dropped_bytes: number;
    }[];
    return rows.map((r) => ({
      sessionId: r.session_id,
      keptBytes: r.kept_bytes,
      droppedBytes: r.dropped_bytes,
      trailingDroppedBytes: r.trailing_dropped_bytes,
    }));
  }

  async listStderrPieces(jobId: string, sessionId: string, afterSeq: number, limit = 1000): Promise<StderrPiece[]> {
    const rows = this.#db
      .prepare(
        "SELECT seq, text, dropped_bytes FROM stderr_pieces WHERE job_id = ? AND session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
      )
      .all(jobId, sessionId, afterSeq, limit) as { seq: number; text: string; dropped_bytes: number }[];
    return rows.map((r) => ({ seq: r.seq, text: r.text, droppedBytes: r.dropped_bytes }));
  }

  #keepLifecycle(events: RawEvent[]): void {
    const insert = this.#db.prepare("INSERT INTO lifecycle_outbox (event) VALUES (?)");
    for (const event of events) insert.run(toJsonString(RawEventSchema, event));
  }

  async putLifecycleEvents(events: RawEvent[]): Promise<void> {
    this.#db.transaction(() => this.#keepLifecycle(events))();
  }

  async claimLifecycleEvents(options: { limit: number; claimMs: number }): Promise<StoredLifecycleEvent[]> {
    return this.#db.transaction(() => {
      const now = Date.now();
      const rows = this.#db
        .prepare(
          "SELECT seq, event FROM lifecycle_outbox WHERE claimed_until IS NULL OR claimed_until < ? ORDER BY seq LIMIT ?",
        )
        .all(now, options.limit) as { seq: number; event: string }[];
      const claim = this.#db.prepare("UPDATE lifecycle_outbox SET claimed_until = ? WHERE seq = ?");
      for (const row of rows) claim.run(now + options.claimMs, row.seq);
      return rows.map((r) => ({ seq: r.seq, event: fromJsonString(RawEventSchema, r.event) }));
    })();
  }

  async deleteLifecycleEvents(seqs: number[]): Promise<void> {
    const remove = this.#db.prepare("DELETE FROM lifecycle_outbox WHERE seq = ?");
    this.#db.transaction(() => {
      for (const seq of seqs) remove.run(seq);
    })();
  }

  async releaseLifecycleEvents(seqs: number[]): Promise<void> {
    const release = this.#db.prepare("UPDATE lifecycle_outbox SET claimed_until = NULL WHERE seq = ?");
    this.#db.transaction(() => {
      for (const seq of seqs) release.run(seq);
    })();
  }

  async listJobEvents(jobId: string, afterSeq: number, limit = 1000): Promise<JobEvent[]> {
    const rows = this.#db
      .prepare("SELECT event FROM job_events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?")
      .all(jobId, afterSeq, limit) as { event: string }[];
    return rows.map((r) => fromJsonString(JobEventSchema, r.event));
  }

  #upsertPermission(p: PermissionRecord): void {
    this.#db
      .prepare(
        `INSERT INTO permissions (job_id, id, call_id, session_id, tool, input, title, needs_person, status, reason, decider, answered_by,
         answer_input, requested_at, answered_at, delivered) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
         ON CONFLICT (job_id, id) DO UPDATE SET status = excluded.status, reason = excluded.reason, decider = excluded.decider,
         answered_by = excluded.answered_by, answer_input = excluded.answer_input, answered_at = excluded.answered_at,
         delivered = excluded.delivered, needs_person = excluded.needs_person`,
      )
      .run(
        p.jobId,
        p.id,
        p.callId,
        p.sessionId,
        p.tool,
        p.input ? JSON.stringify(p.input) : null,
        p.title,
        p.needsPerson ? 1 : 0,
        p.status,
        p.reason,
        p.decider ?? null,
        p.answeredBy,
        p.answerInput ? JSON.stringify(p.answerInput) : null,
        p.requestedAt.getTime(),
        p.answeredAt?.getTime() ?? null,
        p.delivered ? 1 : 0,
      );
  }

  async getPermission(jobId: string, id: string): Promise<PermissionRecord | undefined> {
    const row = this.#db
      .prepare("SELECT * FROM permissions WHERE job_id = ? AND (id = ? OR call_id = ?) ORDER BY id = ? DESC LIMIT 1")
      .get(jobId, id, id, id) as PermissionRow | undefined;
    return row ? toPermission(row) : undefined;
  }

  async listPermissions(query: ListPermissionsQuery): Promise<PermissionRecord[]> {
    const where: string[] = [];
    const args: unknown[] = [];
    if (query.jobId) {
      where.push("job_id = ?");
      args.push(query.jobId);
    }
    if (query.approvalsOnly) where.push("needs_person = 1");
    if (query.pendingOnly) where.push("status = 'pending'");
    if (query.undeliveredOnly) where.push("status <> 'pending' AND delivered = 0");
    const sql = `SELECT * FROM permissions ${where.length ? `WHERE ${where.join(" AND ")}` : ""} ORDER BY requested_at, rowid`;
    return (this.#db.prepare(sql).all(...args) as PermissionRow[]).map(toPermission);
  }

  async markPermissionDelivered(jobId: string, id: string): Promise<void> {
    this.#db.prepare("UPDATE permissions SET delivered = 1 WHERE job_id = ? AND id = ?").run(jobId, id);
  }

  async putOperationCheckpoint(record: OperationCheckpoint): Promise<void> {
    this.#db
      .prepare(
        `INSERT INTO operation_checkpoints (job_id, call_id, record, delivered) VALUES (?, ?, ?, ?)
         ON CONFLICT (job_id, call_id) DO UPDATE SET record = excluded.record, delivered = excluded.delivered`,
      )
      .run(record.jobId, record.callId, JSON.stringify(record), record.delivered ? 1 : 0);
  }

  async getOperationCheckpoint(jobId: string, callId: string): Promise<OperationCheckpoint | undefined> {
    const row = this.#db
      .prepare("SELECT record FROM operation_checkpoints WHERE job_id = ? AND call_id = ?")
      .get(jobId, callId) as { record: string } | undefined;
    return row ? (JSON.parse(row.record) as OperationCheckpoint) : undefined;
  }

  async listOperationCheckpoints(jobId: string): Promise<OperationCheckpoint[]> {
    const rows = this.#db
      .prepare("SELECT record FROM operation_checkpoints WHERE job_id = ? ORDER BY call_id")
      .all(jobId) as { record: string }[];
    return rows.map((r) => JSON.parse(r.record) as OperationCheckpoint);
  }

  async close(): Promise<void> {
    this.#db.close();
  }
}
