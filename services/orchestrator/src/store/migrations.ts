// The orchestrator's schema as one list of numbered migrations for both
// engines, written once with Kysely's schema builder and compiled for each
// (a time is timestamptz on PostgreSQL and INTEGER milliseconds on SQLite,
// JSON jsonb or TEXT, and so on: `ColumnTypes`). Each belongs to a part:
// on PostgreSQL every part is in the one schema; on SQLite `jobs` is
// orchestrator.db, `graphs` is graphs.db and `cluster` (leases, the node
// registry) does not exist. Append only: never edit an applied one.
//
// PostgreSQL applies them with @oz0/postgres's runMigrations (advisory
// locks, safe when replicas start at once), recorded in `oz0_migrations`
// under the component `orchestrator`: versions 1-11 are the ones
// postgres-migrations.ts applied before, so a database it migrated is
// migrated forward. SQLite records them in an `oz0_migrations` table of each
// file; a file from before numbered migrations (its schema changed ad hoc
// at each open) is adopted first: each migration's `present` probe says
// whether the file already has what it makes, and those are recorded as
// applied without running.
import type Database from "better-sqlite3";
import {
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type ColumnDataType,
  type Compilable,
  type CreateTableBuilder,
} from "kysely";
import { runMigrations, type Migration } from "@oz0/postgres";
import type pg from "pg";

export type SchemaPart = "jobs" | "graphs" | "cluster";
/** Migrations use Kysely's schema builder only: no table types. */
type SchemaOnly = Record<string, never>;
type EngineName = "sqlite" | "postgres";

/** Column types by engine. */
interface ColumnTypes {
  engine: EngineName;
  time: ColumnDataType;
  json: ColumnDataType;
  /** Definitions, deltas and bags keep their key order as written (json, not jsonb). */
  orderedJson: ColumnDataType;
  bool: ColumnDataType;
  bigint: ColumnDataType;
}

const TYPES: Record<EngineName, ColumnTypes> = {
  postgres: {
    engine: "postgres",
    time: "timestamptz",
    json: "jsonb",
    orderedJson: "json",
    bool: "boolean",
    bigint: "bigint",
  },
  sqlite: { engine: "sqlite", time: "integer", json: "text", orderedJson: "text", bool: "integer", bigint: "integer" },
};

/** What a SQLite file from before numbered migrations has, for adopting it. */
interface Probe {
  hasTable(name: string): boolean;
  hasColumn(table: string, column: string): boolean;
}

export interface OrchestratorMigration {
  version: number;
  name: string;
  part: SchemaPart;
  /** Engines it runs on; default both. */
  only?: EngineName;
  /** The statements, built for the engine (a string: SQL Kysely's schema builder cannot make). */
  up(db: Kysely<SchemaOnly>, t: ColumnTypes): (Compilable | string)[];
  /** On a SQLite file from before numbered migrations: it already has what this makes. */
  present?(probe: Probe): boolean;
}

type Table = CreateTableBuilder<string, string>;
const notNull = (c: { notNull(): unknown }) => c.notNull() as never;

/** PostgreSQL's insertion order column (SQLite's rowid plays it). */
function withOrd(t: ColumnTypes, table: Table): Table {
  return t.engine === "postgres" ? table.addColumn("ord", "bigserial", notNull) : table;
}

export const MIGRATIONS: readonly OrchestratorMigration[] = [
  {
    version: 1,
    name: "job store",
    part: "jobs",
    present: (p) => p.hasTable("jobs"),
    up: (db, t) => [
      db.schema
        .createTable("plugins")
        .addColumn("name", "text", (c) => c.primaryKey())
        .addColumn("version", "text", notNull)
        .addColumn("description", "text", notNull)
        .addColumn("source", "text", notNull)
        .addColumn("path", "text", notNull)
        .addColumn("manifest", t.json, notNull)
        .addColumn("installed_at", t.time, notNull),
      db.schema
        .createTable("agent_versions")
        .addColumn("name", "text", notNull)
        .addColumn("version", "integer", notNull)
        .addColumn("content_hash", "text", notNull)
        .addColumn("plugin", "text", notNull)
        .addColumn("plugin_version", "text", notNull)
        .addColumn("plugin_path", "text", notNull)
        .addColumn("definition", t.json, notNull)
        .addColumn("instructions", "text", notNull)
        .addColumn("harness", t.json, notNull)
        .addColumn("published_at", t.time, notNull)
        .addPrimaryKeyConstraint("agent_versions_pkey", ["name", "version"]),
      withOrd(
        t,
        db.schema
          .createTable("jobs")
          .addColumn("id", "text", (c) => c.primaryKey())
          .addColumn("agent_name", "text", notNull)
          .addColumn("agent_version", "integer", notNull)
          .addColumn("input", "text", notNull)
          .addColumn("state", "text", notNull)
          .addColumn("created_at", t.time, notNull)
          .addColumn("updated_at", t.time, notNull)
          .addColumn("finished_at", t.time)
          .addColumn("result_text", "text", notNull)
          .addColumn("stop_reason", "integer", notNull)
          .addColumn("error", "text", notNull)
          .addColumn("session_id", "text", notNull)
          .addColumn("sandbox_url", "text", notNull)
          .addColumn("last_seq", t.bigint, notNull)
          .addColumn("sandbox_seq", t.bigint, notNull)
          .addColumn("attachments", t.json, notNull)
          .addColumn("token_id", "text", notNull)
          .addColumn("cancel_requested_at", t.time),
      ),
      db.schema.createIndex("jobs_by_state").on("jobs").column("state"),
      // Newest first, ties in insertion order (ListJobs' pages).
      t.engine === "postgres"
        ? db.schema.createIndex("jobs_by_created").on("jobs").columns(["created_at desc", "ord desc"])
        : db.schema.createIndex("jobs_by_created").on("jobs").column("created_at"),
      db.schema
        .createTable("job_events")
        .addColumn("job_id", "text", notNull)
        .addColumn("seq", t.bigint, notNull)
        .addColumn("time", t.time, notNull)
        .addColumn("event", t.json, notNull)
        .addPrimaryKeyConstraint("job_events_pkey", ["job_id", "seq"]),
      withOrd(
        t,
        db.schema
          .createTable("permissions")
          .addColumn("job_id", "text", notNull)
          .addColumn("id", "text", notNull)
          .addColumn("call_id", "text", notNull)
          .addColumn("session_id", "text", notNull)
          .addColumn("tool", "text", notNull)
          .addColumn("input", t.json)
          .addColumn("title", "text", notNull)
          .addColumn("needs_person", t.bool, notNull)
          .addColumn("status", "text", notNull)
          .addColumn("reason", "text", notNull)
          .addColumn("decider", "text")
          .addColumn("answered_by", "text", notNull)
          .addColumn("answer_input", t.json)
          .addColumn("requested_at", t.time, notNull)
          .addColumn("answered_at", t.time)
          .addColumn("delivered", t.bool, notNull),
      ).addPrimaryKeyConstraint("permissions_pkey", ["job_id", "id"]),
      db.schema.createIndex("permissions_by_status").on("permissions").column("status"),
      db.schema.createIndex("permissions_by_call").on("permissions").columns(["job_id", "call_id"]),
    ],
  },
  {
    version: 2,
    name: "leases",
    part: "cluster",
    only: "postgres",
    up: (db) => [
      // Fencing tokens come from one sequence, so a token is never handed out twice,
      // even after a lease row is released and acquired again.
      "CREATE SEQUENCE lease_tokens",
      db.schema
        .createTable("leases")
        .addColumn("kind", "text", notNull)
        .addColumn("resource", "text", notNull)
        .addColumn("owner", "text", notNull)
        .addColumn("token", "bigint", notNull)
        .addColumn("acquired_at", "timestamptz", notNull)
        .addColumn("expires_at", "timestamptz", notNull)
        .addPrimaryKeyConstraint("leases_pkey", ["kind", "resource"]),
      db.schema.createIndex("leases_by_expiry").on("leases").columns(["kind", "expires_at"]),
      db.schema.createIndex("leases_by_owner").on("leases").column("owner"),
    ],
  },
  {
    version: 3,
    name: "sandbox nodes",
    part: "cluster",
    only: "postgres",
    up: (db) => [
      db.schema
        .createTable("sandbox_nodes")
        .addColumn("id", "text", (c) => c.primaryKey())
        .addColumn("url", "text", notNull)
        .addColumn("capacity", "integer", notNull)
        .addColumn("placed", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("registered_at", "timestamptz", notNull)
        .addColumn("last_heartbeat", "timestamptz", notNull),
      db.schema
        .createTable("session_placements")
        .addColumn("session_id", "text", (c) => c.primaryKey())
        .addColumn("job_id", "text", notNull)
        .addColumn("node_id", "text", (c) => c.notNull().references("sandbox_nodes.id"))
        .addColumn("placed_at", "timestamptz", notNull),
      db.schema.createIndex("session_placements_by_node").on("session_placements").column("node_id"),
    ],
  },
  {
    version: 4,
    name: "lease lifetimes",
    part: "cluster",
    only: "postgres",
    // Each lease renews for the lifetime it was acquired with, not the manager's default.
    up: (db) => [db.schema.alterTable("leases").addColumn("ttl_ms", "integer", (c) => c.notNull().defaultTo(30000))],
  },
  {
    version: 5,
    name: "harness operation checkpoints",
    part: "jobs",
    // One row per runtime tool call of a job (operation-runner.ts), so the replica that takes a job over resumes its operations.
    present: (p) => p.hasTable("operation_checkpoints"),
    up: (db, t) => [
      db.schema
        .createTable("operation_checkpoints")
        .addColumn("job_id", "text", notNull)
        .addColumn("call_id", "text", notNull)
        .addColumn("record", t.json, notNull)
        .addColumn("delivered", t.bool, notNull)
        .addPrimaryKeyConstraint("operation_checkpoints_pkey", ["job_id", "call_id"]),
    ],
  },
  {
    version: 6,
    name: "graph runs",
    part: "graphs",
    // Graph versions, graph jobs and step jobs (sql-graph-store.ts); on PostgreSQL also the runs' checkpoints
    // (postgres-checkpoint-store.ts; @oz0/graph keeps its own tables in graphs.db). On SQLite these were made
    // as orch_graph_*, renamed by migration 12.
    present: (p) => p.hasTable("orch_graph_versions"),
    up: (db, t) => {
      const prefix = t.engine === "sqlite" ? "orch_" : "";
      const tables: (Compilable | string)[] = [
        db.schema
          .createTable(`${prefix}graph_versions`)
          .addColumn("name", "text", notNull)
          .addColumn("version", "integer", notNull)
          .addColumn("content_hash", "text", notNull)
          .addColumn("plugin", "text", notNull)
          .addColumn("plugin_version", "text", notNull)
          .addColumn("plugin_path", "text", notNull)
          .addColumn("definition", t.orderedJson, notNull)
          .addColumn("published_at", t.time, notNull)
          .addPrimaryKeyConstraint(`${prefix}graph_versions_pkey`, ["name", "version"]),
        db.schema
          .createTable(`${prefix}graph_jobs`)
          .addColumn("job_id", "text", (c) => c.primaryKey())
          .addColumn("graph", "text", notNull)
          .addColumn("version", "integer", notNull)
          .addColumn("pinned_agents", t.json, notNull)
          .addColumn("created_at", t.time, notNull),
        db.schema
          .createTable(`${prefix}graph_step_jobs`)
          .addColumn("idempotency_key", "text", (c) => c.primaryKey())
          .addColumn("run_id", "text", notNull)
          .addColumn("step_job_id", "text", notNull)
          .addColumn("created_at", t.time, notNull),
      ];
      if (t.engine === "sqlite") return tables;
      return [
        ...tables,
        db.schema.createIndex("graph_step_jobs_by_run").on("graph_step_jobs").column("run_id"),
        db.schema
          .createTable("graph_definitions")
          .addColumn("hash", "text", (c) => c.primaryKey())
          .addColumn("definition", "json", notNull),
        db.schema
          .createTable("graph_runs")
          .addColumn("run_id", "text", (c) => c.primaryKey())
          .addColumn("graph", "text", notNull)
          .addColumn("definition_hash", "text", (c) => c.notNull().references("graph_definitions.hash"))
          .addColumn("definition_version", "text")
          .addColumn("input", "json", notNull)
          .addColumn("status", "text", notNull)
          .addColumn("started_at", "text", notNull)
          .addColumn("finished_at", "text")
          .addColumn("error", "json")
          .addColumn("conflicts", "json")
          .addColumn("result", "json")
          // Creation order: listRuns returns runs oldest first.
          .addColumn("ord", "bigserial", notNull),
        db.schema.createIndex("graph_runs_by_status").on("graph_runs").columns(["status", "ord"]),
        db.schema
          .createTable("graph_steps")
          .addColumn("run_id", "text", (c) => c.notNull().references("graph_runs.run_id").onDelete("cascade"))
          .addColumn("path", "text", notNull)
          .addColumn("node_id", "text", notNull)
          .addColumn("iteration", "integer", notNull)
          .addColumn("outcome", "text", notNull)
          .addColumn("delta", "json", notNull)
          .addColumn("decision", "json")
          .addPrimaryKeyConstraint("graph_steps_pkey", ["run_id", "path"]),
      ];
    },
  },
  {
    version: 7,
    name: "served tools",
    part: "jobs",
    // The runtime tools the orchestrator serves a job itself (a graph manager's decisions), so any replica serves them.
    present: (p) => p.hasColumn("jobs", "served_tools"),
    up: (db) => [db.schema.alterTable("jobs").addColumn("served_tools", "text", (c) => c.notNull().defaultTo(""))],
  },
  {
    version: 8,
    name: "lifecycle outbox",
    part: "jobs",
    // Lifecycle events written with the job change they report, until the events service accepts them.
    present: (p) => p.hasTable("lifecycle_outbox"),
    up: (db, t) => [
      db.schema
        .createTable("lifecycle_outbox")
        .addColumn("seq", t.engine === "postgres" ? "bigserial" : "integer", (c) =>
          t.engine === "postgres" ? c.primaryKey() : c.primaryKey().autoIncrement(),
        )
        .addColumn("event", "text", notNull)
        .addColumn("claimed_until", t.time),
    ],
  },
  {
    version: 9,
    name: "job starter",
    part: "jobs",
    // Who started a job, so approvals.prevent_self_approval can refuse that principal's answers.
    present: (p) => p.hasColumn("jobs", "started_by"),
    up: (db) => [db.schema.alterTable("jobs").addColumn("started_by", "text", (c) => c.notNull().defaultTo(""))],
  },
  {
    version: 10,
    name: "session stderr",
    part: "jobs",
    // What each session's harness wrote to stderr, bounded per session (`oz0 jobs logs`): a row per session
    // (in the order they first wrote), and its pieces by the sandbox's seq.
    present: (p) => p.hasTable("session_stderr"),
    up: (db, t) => [
      withOrd(
        t,
        db.schema
          .createTable("session_stderr")
          .addColumn("job_id", "text", notNull)
          .addColumn("session_id", "text", notNull)
          .addColumn("last_seq", t.bigint, notNull)
          .addColumn("kept_bytes", t.bigint, notNull)
          .addColumn("dropped_bytes", t.bigint, notNull)
          .addColumn("trailing_dropped_bytes", t.bigint, notNull),
      ).addPrimaryKeyConstraint("session_stderr_pkey", ["job_id", "session_id"]),
      db.schema
        .createTable("stderr_pieces")
        .addColumn("job_id", "text", notNull)
        .addColumn("session_id", "text", notNull)
        .addColumn("seq", t.bigint, notNull)
        .addColumn("text", "text", notNull)
        .addColumn("bytes", "integer", notNull)
        .addColumn("dropped_bytes", t.bigint, notNull)
        .addPrimaryKeyConstraint("stderr_pieces_pkey", ["job_id", "session_id", "seq"]),
    ],
  },
  {
    version: 11,
    name: "job start and trace",
    part: "jobs",
    // When a job began running and the id of its trace, for `oz0 jobs show` (and a link to a trace viewer).
    present: (p) => p.hasColumn("jobs", "started_at") && p.hasColumn("jobs", "trace_id"),
    up: (db, t) => [
      db.schema.alterTable("jobs").addColumn("started_at", t.time),
      db.schema.alterTable("jobs").addColumn("trace_id", "text", (c) => c.notNull().defaultTo("")),
    ],
  },
  {
    version: 12,
    name: "graph tables named as on PostgreSQL",
    part: "graphs",
    only: "sqlite",
    // One name per table on both engines, so the graph store's queries are written once.
    up: (db) =>
      ["graph_versions", "graph_jobs", "graph_step_jobs"].map((name) =>
        db.schema.alterTable(`orch_${name}`).renameTo(name),
      ),
  },
  {
    version: 13,
    name: "permissions by call on adopted files",
    part: "jobs",
    only: "sqlite",
    // Migration 1 makes it; files from before numbered migrations never had it (getPermission looks calls up by it).
    up: (db) => [
      db.schema.createIndex("permissions_by_call").ifNotExists().on("permissions").columns(["job_id", "call_id"]),
    ],
  },
];

/** Kysely that only compiles (no connection): the DDL of a migration as text for one engine. */
const COMPILERS: Record<EngineName, Kysely<SchemaOnly>> = {
  postgres: new Kysely<SchemaOnly>({
    dialect: {
      createAdapter: () => new PostgresAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => new PostgresIntrospector(db),
      createQueryCompiler: () => new PostgresQueryCompiler(),
    },
  }),
  sqlite: new Kysely<SchemaOnly>({
    dialect: {
      createAdapter: () => new SqliteAdapter(),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => new SqliteIntrospector(db),
      createQueryCompiler: () => new SqliteQueryCompiler(),
    },
  }),
};

function migrationsFor(engine: EngineName, part?: SchemaPart): Migration[] {
  return MIGRATIONS.filter((m) => (!m.only || m.only === engine) && (!part || m.part === part)).map((m) => ({
    version: m.version,
    name: m.name,
    sql: m
      .up(COMPILERS[engine], TYPES[engine])
      .map((statement) => `${typeof statement === "string" ? statement : statement.compile().sql};`)
      .join("\n"),
  }));
}

/** Every migration PostgreSQL applies, as SQL. */
export const ORCHESTRATOR_MIGRATIONS: readonly Migration[] = migrationsFor("postgres");

/** The orchestrator's migrations on `schema`; every orchestrator PostgreSQL module calls it on open. */
export async function migrateOrchestrator(pool: pg.Pool, schema: string): Promise<number[]> {
  return runMigrations({ pool, schema, component: "orchestrator", migrations: ORCHESTRATOR_MIGRATIONS });
}

/**
 * Applies `part`'s migrations a SQLite file lacks, in one IMMEDIATE
 * transaction (two processes opening one file at once: the second waits,
 * then finds them recorded). Returns the versions it ran.
 */
export function migrateSqlite(db: Database.Database, part: Exclude<SchemaPart, "cluster">): number[] {
  const migrations = migrationsFor("sqlite", part);
  const byVersion = new Map(MIGRATIONS.map((m) => [m.version, m]));
  return db
    .transaction((): number[] => {
      const probe: Probe = {
        hasTable: (name) =>
          db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined,
        hasColumn: (table, column) =>
          (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string }[]).some((c) => c.name === column),
      };
      const adopting =
        !probe.hasTable("oz0_migrations") && migrations.some((m) => byVersion.get(m.version)?.present?.(probe));
      db.exec(`CREATE TABLE IF NOT EXISTS oz0_migrations (component TEXT NOT NULL, version INTEGER NOT NULL, name TEXT NOT NULL,
      applied_at INTEGER NOT NULL, PRIMARY KEY (component, version))`);
      const done = new Set(
        (
          db.prepare("SELECT version FROM oz0_migrations WHERE component = 'orchestrator'").all() as {
            version: number;
          }[]
        ).map((r) => r.version),
      );
      const record = db.prepare(
        "INSERT INTO oz0_migrations (component, version, name, applied_at) VALUES ('orchestrator', ?, ?, ?)",
      );
      const ran: number[] = [];
      for (const migration of migrations) {
        if (done.has(migration.version)) continue;
        if (!(adopting && byVersion.get(migration.version)?.present?.(probe))) {
          db.exec(migration.sql);
          ran.push(migration.version);
        }
        record.run(migration.version, migration.name, Date.now());
      }
      return ran;
    })
    .immediate();
}
