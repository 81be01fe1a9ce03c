// The one query layer under the orchestrator's stores: Kysely over SQLite
// (better-sqlite3, the embedded default) or PostgreSQL (node-postgres, for
// replicas). Queries, row mappers (sql-rows.ts) and numbered migrations
// (migrations.ts) are written once against the tables below; what the two
// engines store differently is a value each column may hold either way
// (a time is a Date on PostgreSQL and milliseconds on SQLite, JSON arrives
// parsed from PostgreSQL and as text from SQLite), and `SqlEngine` names the
// few differences a query must know. Row locks, advisory locks and
// LISTEN/NOTIFY stay in the PostgreSQL store and cluster/.
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { createSchemaPool, jsonbText } from "@oz0/postgres";
import { SqliteCheckpointer } from "@oz0/sqlite";
import { Kysely, PostgresDialect, SqliteDialect, type Generated } from "kysely";
import type pg from "pg";
import { cachedStatements } from "./sqlite-statements.js";

/** A time: timestamptz (a Date from pg) or SQLite INTEGER milliseconds. */
export type Time = Date | number;
/** A boolean: PostgreSQL boolean or SQLite INTEGER 0/1. */
export type Bool = boolean | number;
/** JSON: written as text on both; jsonb/json arrive parsed from pg, text from SQLite. */
export type Json<T> = T | string;
/** A bigint column: pg returns it as a string, SQLite as a number. */
export type Count = number | string;

export interface PluginsTable {
  name: string;
  version: string;
  description: string;
  source: string;
  path: string;
  manifest: Json<object>;
  installed_at: Time;
}

export interface VersionsTable {
  name: string;
  version: number;
  content_hash: string;
  plugin: string;
  plugin_version: string;
  plugin_path: string;
  definition: Json<object>;
  published_at: Time;
}

export interface AgentVersionsTable extends VersionsTable {
  instructions: string;
  harness: Json<object>;
}

export interface JobsTable {
  id: string;
  agent_name: string;
  agent_version: number;
  input: string;
  state: string;
  created_at: Time;
  updated_at: Time;
  finished_at: Time | null;
  result_text: string;
  stop_reason: number;
  error: string;
  session_id: string;
  sandbox_url: string;
  last_seq: Count;
  sandbox_seq: Count;
  attachments: Json<string[]>;
  token_id: string;
  cancel_requested_at: Time | null;
  served_tools: string;
  started_by: string;
  started_at: Time | null;
  trace_id: string;
  traceparent: string;
  rule_broken: string;
}

export interface JobEventsTable {
  job_id: string;
  seq: Count;
  time: Time;
  event: Json<object>;
}

export interface PermissionsTable {
  job_id: string;
  id: string;
  call_id: string;
  session_id: string;
  tool: string;
  input: Json<object> | null;
  title: string;
  needs_person: Bool;
  status: string;
  reason: string;
  decider: string | null;
  answered_by: string;
  answer_input: Json<object> | null;
  /** Who chose answer_input: a hook's label or `person ID`; "" when nobody changed the input. */
  input_changed_by: string;
  requested_at: Time;
  answered_at: Time | null;
  delivered: Bool;
  /** The runtime tool call that used the permission; "" while none has. */
  runtime_call: string;
}

export interface OperationCheckpointsTable {
  job_id: string;
  call_id: string;
  record: Json<object>;
  delivered: Bool;
}

export interface LifecycleOutboxTable {
  seq: Generated<Count>;
  event: string;
  claimed_until: Time | null;
}

export interface SessionStderrTable {
  job_id: string;
  session_id: string;
  last_seq: Count;
  kept_bytes: Count;
  dropped_bytes: Count;
  trailing_dropped_bytes: Count;
}

export interface StderrPiecesTable {
  job_id: string;
  session_id: string;
  seq: Count;
  text: string;
  bytes: number;
  dropped_bytes: Count;
}

export interface GraphJobsTable {
  job_id: string;
  graph: string;
  version: number;
  pinned_agents: Json<Record<string, number>>;
  created_at: Time;
}

export interface GraphStepJobsTable {
  idempotency_key: string;
  run_id: string;
  step_job_id: string;
  created_at: Time;
}

/** The tables the shared queries use (SQLite keeps the graph ones in graphs.db, PostgreSQL all in one schema). */
/** A session token the LLM proxy may still honour: kept from its mint until a revoke of it succeeded. */
export interface SessionTokensTable {
  token_id: string;
  /** The job it was minted for; empty when only a revoke of it was recorded. */
  job_id: string;
  /** A revoke was asked for and did not succeed (yet). */
  revoke_asked: Bool;
  /** A sweep is revoking it until then; null when none is. */
  claimed_until: Time | null;
}

export interface Tables {
  plugins: PluginsTable;
  agent_versions: AgentVersionsTable;
  jobs: JobsTable;
  job_events: JobEventsTable;
  permissions: PermissionsTable;
  operation_checkpoints: OperationCheckpointsTable;
  lifecycle_outbox: LifecycleOutboxTable;
  session_tokens: SessionTokensTable;
  session_stderr: SessionStderrTable;
  stderr_pieces: StderrPiecesTable;
  graph_versions: VersionsTable;
  graph_jobs: GraphJobsTable;
  graph_step_jobs: GraphStepJobsTable;
}

export type Db = Kysely<Tables>;

/** What a shared query must know about the engine under it. */
export interface SqlEngine {
  readonly name: "sqlite" | "postgres";
  /** A time as the engine's column takes it. */
  time(date: Date): Time;
  bool(value: boolean): Bool;
  /**
   * JSON text as the engine's JSON columns take it. PostgreSQL's jsonb refuses the `\u0000` escape, so a NUL
   * (in a command's output, say) is stored as U+FFFD there, as in its text columns (@oz0/postgres's pool).
   */
  jsonText(json: string): string;
  /** The column that orders a table's rows as inserted: SQLite's rowid, PostgreSQL's `ord` (bigserial). */
  readonly insertionOrder: "rowid" | "ord";
  /** SQLite's LIKE already ignores ASCII case; PostgreSQL's does not. */
  readonly caseInsensitiveLike: "like" | "ilike";
  /** FOR UPDATE: PostgreSQL's replicas write at once; SQLite has one writer and no row locks. */
  readonly rowLocks: boolean;
}

export const SQLITE: SqlEngine = {
  name: "sqlite",
  time: (date) => date.getTime(),
  bool: (value) => (value ? 1 : 0),
  jsonText: (json) => json,
  insertionOrder: "rowid",
  caseInsensitiveLike: "like",
  rowLocks: false,
};

export const POSTGRES: SqlEngine = {
  name: "postgres",
  time: (date) => date,
  bool: (value) => value,
  jsonText: jsonbText,
  insertionOrder: "ord",
  caseInsensitiveLike: "ilike",
  rowLocks: true,
};

export interface SqliteFileOptions {
  /** A file path, or ":memory:". */
  file: string;
  /**
   * NORMAL for the job store (WAL: a commit survives a process crash, and
   * at worst the last commits are lost to a power cut); FULL for graphs.db,
   * whose checkpoints must survive a power cut too. Kept as before Kysely.
   */
  synchronous: "NORMAL" | "FULL";
  /**
   * How the checkpoint thread learns of commits (@oz0/sqlite's SqliteCheckpointer). `counted` (the job store):
   * every write goes through Kysely here, which counts each commit that changed rows, and the thread sleeps
   * until one comes (issue 24: it woke every second to ask the file whether one had). `polled`, the default
   * (graphs.db, which @oz0/graph writes through the handle too): the thread asks the file each
   * `checkpointEveryMs`.
   */
  checkpoints?: "counted" | "polled";
  /**
   * How often the checkpoint thread looks for commits to copy into the file. Default 1 s (counted: while
   * commits come); graphs.db, which only graph runs write, 5 s: each look wakes the thread, and an idle
   * orchestrator paid about half a millisecond of CPU a second for looks at a file nothing wrote (issue 24).
   */
  checkpointEveryMs?: number;
}

/** One SQLite file opened in this process: its handle and the Kysely over it. */
export interface SqliteFile {
  /** For @oz0/graph's SqliteCheckpointStore, which shares graphs.db's handle. */
  readonly handle: Database.Database;
  readonly db: Db;
  /** Closes the handle once every opener released it. */
  release(): Promise<void>;
}

const openFiles = new Map<string, { file: SqliteFile; openers: number }>();

/**
 * The file's handle, with the pragmas every orchestrator SQLite file uses,
 * and Kysely on it, shared by every store of this process that opens the
 * same file. Kysely's SqliteDialect runs one query at a time on its handle
 * (a mutex) and a transaction as BEGIN … COMMIT across awaits; two handles
 * on one file in one thread would deadlock (one waits, blocking the thread,
 * for a write lock the other can only free on that thread), so there is one.
 * A transaction keeps the atomicity and durability better-sqlite3's
 * db.transaction gave: BEGIN IMMEDIATE … COMMIT on the same handle, with the
 * file's WAL and synchronous settings unchanged (sqlite-statements.ts).
 */
export function openSqlite(options: SqliteFileOptions & { migrate: (handle: Database.Database) => void }): SqliteFile {
  const key = options.file === ":memory:" ? undefined : path.resolve(options.file);
  const open = key ? openFiles.get(key) : undefined;
  // Already open in this process: already migrated too.
  if (open) {
    open.openers += 1;
    return open.file;
  }
  if (key) mkdirSync(path.dirname(key), { recursive: true });
  const handle = new Database(options.file);
  handle.pragma("journal_mode = WAL");
  handle.pragma(`synchronous = ${options.synchronous}`);
  handle.pragma("busy_timeout = 5000");
  try {
    options.migrate(handle);
  } catch (error) {
    handle.close();
    throw error;
  }
  // The WAL is copied into the file by a thread of its own (@oz0/sqlite's SqliteCheckpointer): a checkpoint run by
  // whichever commit crossed 1,000 pages stalled the event loop, and every job with it, for its fsync.
  const checkpointer = key
    ? new SqliteCheckpointer({
        file: key,
        trigger: options.checkpoints ?? "polled",
        // Counted as polled before: a checkpoint at most once a second while commits come.
        intervalMs: options.checkpointEveryMs ?? 1_000,
        onError: (error) =>
          process.emitWarning(
            `${key}: ${(error as Error).message}; it is tried again in ${options.checkpointEveryMs === undefined ? "a second" : `${options.checkpointEveryMs / 1000} s`} (a full or failing disk stops the writes too)`,
            { code: "OZ0_SQLITE_CHECKPOINT" },
          ),
      })
    : undefined;
  if (checkpointer) handle.pragma("wal_autocheckpoint = 0");
  // What the migrations wrote is copied in as a commit's would be (a polled thread's first look found it).
  if (checkpointer && options.checkpoints === "counted") checkpointer.wrote();
  const entry = {
    openers: 1,
    file: {
      handle,
      db: new Kysely<Tables>({
        dialect: new SqliteDialect({
          database: cachedStatements(
            handle,
            checkpointer && options.checkpoints === "counted" ? () => checkpointer.wrote() : undefined,
          ),
        }),
      }),
      async release(): Promise<void> {
        if (--entry.openers > 0) return;
        if (key) openFiles.delete(key);
        // The thread's last checkpoint first; closing the handle then finds the log copied.
        await checkpointer?.close();
        handle.close();
      },
    },
  };
  if (key) openFiles.set(key, entry);
  return entry.file;
}

/** Kysely on a pool; `destroy()` would end the pool, so callers that do not own it never call it. */
export function postgresDb(pool: pg.Pool): Db {
  return new Kysely<Tables>({ dialect: new PostgresDialect({ pool }) });
}

export interface PostgresConnectionOptions {
  /** A `postgres://` URL (DATABASE_URL). */
  connectionString: string;
  /**
   * The schema holding the tables, created when missing. Default `oz0`.
   * Tests give each run its own so runs sharing a server never collide.
   */
  schema?: string;
  /** Pool size. Default 10. */
  maxConnections?: number;
  /** How long a query may take before it fails here (see createSchemaPool). Default: as long as it takes. */
  queryTimeoutMs?: number;
}

/** A pool whose connections resolve unqualified table names in the orchestrator's schema. */
export function createPostgresPool(options: PostgresConnectionOptions): pg.Pool {
  return createSchemaPool({ ...options, schema: options.schema ?? "oz0" });
}

/** A value the store cannot write however often it tries (a number JSON has no way to write). */
export class UnstorableValueError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnstorableValueError";
  }
}

/**
 * Whether the database refused a statement for the data it carried: a value
 * the column cannot hold (PostgreSQL's class 22, data exception), a
 * constraint it breaks (class 23); SQLite's SQLITE_CONSTRAINT*, SQLITE_TOOBIG,
 * SQLITE_MISMATCH; or the store could not write it at all
 * (UnstorableValueError). A retry of the same data is refused again, unlike
 * a connection lost, a busy database or a serialization failure. (Not class
 * 54, program limits: its 54000 is also the whole database refusing writes
 * until a vacuum, which says nothing of the data. The btree-row limit it
 * would catch is kept off by the id rules of @oz0/harness.)
 */
export function refusedForItsData(error: unknown): boolean {
  if (error instanceof UnstorableValueError) return true;
  const code = (error as { code?: unknown } | undefined)?.code;
  if (typeof code !== "string") return false;
  if (/^2[23][0-9A-Z]{3}$/.test(code)) return true;
  return code.startsWith("SQLITE_CONSTRAINT") || code === "SQLITE_TOOBIG" || code === "SQLITE_MISMATCH";
}
