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
import { runSqliteMigrations, type SchemaProbe, type SqliteMigration } from "@oz0/sqlite";
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

export interface OrchestratorMigration {
  version: number;
  name: string;
  part: SchemaPart;
  /** Engines it runs on; default both. */
  only?: EngineName;
  /** The statements, built for the engine (a string: SQL Kysely's schema builder cannot make). */
  up(db: Kysely<SchemaOnly>, t: ColumnTypes, table: TableMaker): (Compilable | string)[];
  /** On a SQLite file from before numbered migrations: it already has what this makes. */
  present?(probe: SchemaProbe): boolean;
}

type Table = CreateTableBuilder<string, string>;
/** CREATE TABLE `name` for the engine, from its column list (see tableMaker). */
type TableMaker = (name: string, columns: string) => Table;

/**
 * CREATE TABLE from its columns in order, `, ` between them, each written
 * `name type`, then `!` for NOT NULL or `*` for the primary key, then
 * optionally ` = 0` (a default) and ` -> table.column` (a reference, with
 * ` cascade` for ON DELETE CASCADE); last, optionally, `primary key (a, b)`.
 * A type is SQL's (text, integer, bigserial) or one each engine spells its
 * own way (time, json, orderedJson, bool, bigint: `ColumnTypes`). `ord`,
 * PostgreSQL's insertion order, is left out on SQLite, where rowid plays it.
 */
function tableMaker(db: Kysely<SchemaOnly>, t: ColumnTypes): TableMaker {
  return (name, columns) => {
    let table: Table = db.schema.createTable(name);
    for (const column of columns.trim().split(/,\s*(?![^(]*\))/)) {
      const key = /^primary key \(([\w, ]+)\)$/.exec(column)?.[1];
      if (key) {
        table = table.addPrimaryKeyConstraint(`${name}_pkey`, key.split(/,\s*/));
        continue;
      }
      const [, columnName, type, flag, fallback, reference, cascade] =
        /^(\w+) (\w+)([!*]?)(?: = (\d+))?(?: -> (\w+\.\w+)( cascade)?)?$/.exec(column) ?? [];
      if (!columnName || !type) throw new Error(`migration column ${JSON.stringify(column)} is not "name type[!*]"`);
      if (columnName === "ord" && t.engine === "sqlite") continue;
      const engineType = (t as unknown as Record<string, ColumnDataType | undefined>)[type] ?? (type as ColumnDataType);
      table = table.addColumn(columnName, engineType, (c) => {
        let built = flag === "*" ? c.primaryKey() : flag === "!" ? c.notNull() : c;
        if (fallback !== undefined) built = built.defaultTo(Number(fallback));
        if (reference) built = built.references(reference);
        return cascade ? built.onDelete("cascade") : built;
      });
    }
    return table;
  };
}

export const MIGRATIONS: readonly OrchestratorMigration[] = [
  {
    version: 1,
    name: "job store",
    part: "jobs",
    present: (p) => p.hasTable("jobs"),
    up: (db, t, table) => [
      table(
        "plugins",
        `name text*, version text!, description text!, source text!, path text!, manifest json!, installed_at time!`,
      ),
      table(
        "agent_versions",
        `name text!, version integer!, content_hash text!, plugin text!, plugin_version text!, plugin_path text!,
        definition json!, instructions text!, harness json!, published_at time!, primary key (name, version)`,
      ),
      // ord: insertion order, to break ties between jobs created in the same millisecond (SQLite's rowid).
      table(
        "jobs",
        `id text*, agent_name text!, agent_version integer!, input text!, state text!, created_at time!,
        updated_at time!, finished_at time, result_text text!, stop_reason integer!, error text!, session_id text!,
        sandbox_url text!, last_seq bigint!, sandbox_seq bigint!, attachments json!, token_id text!,
        cancel_requested_at time, ord bigserial!`,
      ),
      db.schema.createIndex("jobs_by_state").on("jobs").column("state"),
      // Newest first, ties in insertion order (ListJobs' pages).
      t.engine === "postgres"
        ? db.schema.createIndex("jobs_by_created").on("jobs").columns(["created_at desc", "ord desc"])
        : db.schema.createIndex("jobs_by_created").on("jobs").column("created_at"),
      table("job_events", `job_id text!, seq bigint!, time time!, event json!, primary key (job_id, seq)`),
      table(
        "permissions",
        `job_id text!, id text!, call_id text!, session_id text!, tool text!, input json, title text!,
        needs_person bool!, status text!, reason text!, decider text, answered_by text!, answer_input json,
        requested_at time!, answered_at time, delivered bool!, ord bigserial!, primary key (job_id, id)`,
      ),
      db.schema.createIndex("permissions_by_status").on("permissions").column("status"),
      db.schema.createIndex("permissions_by_call").on("permissions").columns(["job_id", "call_id"]),
    ],
  },
  {
    version: 2,
    name: "leases",
    part: "cluster",
    only: "postgres",
    up: (db, t, table) => [
      // Fencing tokens come from one sequence, so a token is never handed out twice,
      // even after a lease row is released and acquired again.
      "CREATE SEQUENCE lease_tokens",
      table(
        "leases",
        `kind text!, resource text!, owner text!, token bigint!, acquired_at time!, expires_at time!,
        primary key (kind, resource)`,
      ),
      db.schema.createIndex("leases_by_expiry").on("leases").columns(["kind", "expires_at"]),
      db.schema.createIndex("leases_by_owner").on("leases").column("owner"),
    ],
  },
  {
    version: 3,
    name: "sandbox nodes",
    part: "cluster",
    only: "postgres",
    up: (db, t, table) => [
      table(
        "sandbox_nodes",
        `id text*, url text!, capacity integer!, placed integer! = 0, registered_at time!, last_heartbeat time!`,
      ),
      table("session_placements", `session_id text*, job_id text!, node_id text! -> sandbox_nodes.id, placed_at time!`),
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
    // One row per runtime tool call of a job (operation-runner.ts), so the replica that takes a job over resumes
    // its operations.
    present: (p) => p.hasTable("operation_checkpoints"),
    up: (db, t, table) => [
      table(
        "operation_checkpoints",
        `job_id text!, call_id text!, record json!, delivered bool!, primary key (job_id, call_id)`,
      ),
    ],
  },
  {
    version: 6,
    name: "graph runs",
    part: "graphs",
    // Graph versions, graph jobs and step jobs (sql-graph-store.ts); on PostgreSQL also the runs' checkpoints
    // (postgres-checkpoint-store.ts; @oz0/graph keeps its own tables in graphs.db). On SQLite these were made
    // as orch_graph_*, renamed by migration 12. Definitions, deltas and bags keep their key order (orderedJson).
    present: (p) => p.hasTable("orch_graph_versions"),
    up: (db, t, table) => {
      const prefix = t.engine === "sqlite" ? "orch_" : "";
      const tables: (Compilable | string)[] = [
        table(
          `${prefix}graph_versions`,
          `name text!, version integer!, content_hash text!, plugin text!, plugin_version text!, plugin_path text!,
          definition orderedJson!, published_at time!, primary key (name, version)`,
        ),
        table(
          `${prefix}graph_jobs`,
          `job_id text*, graph text!, version integer!, pinned_agents json!, created_at time!`,
        ),
        table(`${prefix}graph_step_jobs`, `idempotency_key text*, run_id text!, step_job_id text!, created_at time!`),
      ];
      if (t.engine === "sqlite") return tables;
      return [
        ...tables,
        db.schema.createIndex("graph_step_jobs_by_run").on("graph_step_jobs").column("run_id"),
        table("graph_definitions", "hash text*, definition orderedJson!"),
        // ord: creation order, listRuns returns runs oldest first.
        table(
          "graph_runs",
          `run_id text*, graph text!, definition_hash text! -> graph_definitions.hash, definition_version text,
          input orderedJson!, status text!, started_at text!, finished_at text, error orderedJson,
          conflicts orderedJson, result orderedJson, ord bigserial!`,
        ),
        db.schema.createIndex("graph_runs_by_status").on("graph_runs").columns(["status", "ord"]),
        table(
          "graph_steps",
          `run_id text! -> graph_runs.run_id cascade, path text!, node_id text!, iteration integer!, outcome text!,
          delta orderedJson!, decision orderedJson, primary key (run_id, path)`,
        ),
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
        .addColumn("event", "text", (c) => c.notNull())
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
    up: (db, t, table) => [
      table(
        "session_stderr",
        `job_id text!, session_id text!, last_seq bigint!, kept_bytes bigint!, dropped_bytes bigint!,
        trailing_dropped_bytes bigint!, ord bigserial!, primary key (job_id, session_id)`,
      ),
      table(
        "stderr_pieces",
        `job_id text!, session_id text!, seq bigint!, text text!, bytes integer!, dropped_bytes bigint!,
        primary key (job_id, session_id, seq)`,
      ),
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
  {
    version: 14,
    name: "job traceparent",
    part: "jobs",
    // The job's root span as a W3C traceparent (trace id, span id, flags): a replica that resumes the job
    // after a restart or a takeover continues that trace, and calls about the job link that span (tracing.ts).
    present: (p) => p.hasColumn("jobs", "traceparent"),
    up: (db) => [db.schema.alterTable("jobs").addColumn("traceparent", "text", (c) => c.notNull().defaultTo(""))],
  },
  {
    version: 15,
    name: "permission used by a runtime call",
    part: "jobs",
    // An approved permission allows one runtime tool call (a harness operation): which one, kept with it, so
    // neither a restart nor another replica lets it allow a second (it was kept in the process's memory).
    present: (p) => p.hasColumn("permissions", "runtime_call"),
    up: (db) => [
      db.schema.alterTable("permissions").addColumn("runtime_call", "text", (c) => c.notNull().defaultTo("")),
    ],
  },
  {
    version: 16,
    name: "session tokens to revoke",
    part: "jobs",
    // Each token minted at the LLM proxy until its revoke succeeded, so a revoke that failed (the proxy away) or
    // never ran (the process died first) is made by a later sweep: a token otherwise never expires. The jobs'
    // tokens from before are kept too: whether their revokes succeeded was never recorded, and revoking again
    // is harmless.
    present: (p) => p.hasTable("session_tokens"),
    up: (db, t, table) => [
      table("session_tokens", `token_id text*, job_id text!, revoke_asked bool!`),
      `INSERT INTO session_tokens (token_id, job_id, revoke_asked)
       SELECT token_id, id, ${t.engine === "postgres" ? "false" : "0"} FROM jobs WHERE token_id <> ''
       ON CONFLICT (token_id) DO NOTHING`,
    ],
  },
  {
    version: 17,
    name: "session token sweep claims",
    part: "jobs",
    // Replicas sweeping at once each revoke other tokens: a sweep claims the rows it revokes for a while, as
    // the lifecycle outbox's shippers claim events. Each replica revoked every row before (harmless, since a
    // revoke is idempotent, but the first sweeps after migration 16 revoked every job's token once a replica).
    present: (p) => p.hasColumn("session_tokens", "claimed_until"),
    up: (db, t) => [db.schema.alterTable("session_tokens").addColumn("claimed_until", t.time)],
  },
  {
    version: 18,
    name: "who changed a permission's input",
    part: "jobs",
    // A hook's changed input is what an approval runs: the approval shows it, and which hook chose it, beside
    // the harness's own (the queue showed only the harness's, and a plain Approve ran the hook's).
    present: (p) => p.hasColumn("permissions", "input_changed_by"),
    up: (db) => [
      db.schema.alterTable("permissions").addColumn("input_changed_by", "text", (c) => c.notNull().defaultTo("")),
    ],
  },
  {
    version: 19,
    name: "the rule a job's session broke",
    part: "jobs",
    // Kept apart from the job's error (a deadline overrun stores one too): a replica that follows the job again
    // after a restart or a takeover withholds its artifacts and fails it with the rule, as the one that saw it did.
    present: (p) => p.hasColumn("jobs", "rule_broken"),
    up: (db) => [db.schema.alterTable("jobs").addColumn("rule_broken", "text", (c) => c.notNull().defaultTo(""))],
  },
  {
    version: 20,
    name: "the pod a sandbox node was registered by",
    part: "cluster",
    only: "postgres",
    // With node identities a node's row keeps the uid of the pod whose token registered it: a pod keeps its address
    // for life, so that pod's token from another address (a copy of it) cannot move the node, its sessions with it.
    present: (p) => p.hasColumn("sandbox_nodes", "pod_uid"),
    up: (db) => [db.schema.alterTable("sandbox_nodes").addColumn("pod_uid", "text", (c) => c.notNull().defaultTo(""))],
  },
  {
    version: 21,
    name: "when the pod's identity was issued",
    part: "cluster",
    only: "postgres",
    // Another pod of a node's name takes it over only with a token issued later than the one that registered it:
    // a copy of a replaced pod's token took the node back from its successor (attacker review).
    present: (p) => p.hasColumn("sandbox_nodes", "pod_issued_at"),
    up: (db) => [
      db.schema.alterTable("sandbox_nodes").addColumn("pod_issued_at", "bigint", (c) => c.notNull().defaultTo(0)),
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

/** The engine's migrations (of one part) as SQL, each with its probe for adopting an old SQLite file. */
function migrationsFor(engine: EngineName, part?: SchemaPart): SqliteMigration[] {
  return MIGRATIONS.filter((m) => (!m.only || m.only === engine) && (!part || m.part === part)).map((m) => ({
    version: m.version,
    name: m.name,
    sql: m
      .up(COMPILERS[engine], TYPES[engine], tableMaker(COMPILERS[engine], TYPES[engine]))
      .map((statement) => `${typeof statement === "string" ? statement : statement.compile().sql};`)
      .join("\n"),
    ...(m.present ? { present: m.present } : {}),
  }));
}

/** Every migration PostgreSQL applies, as SQL. */
export const ORCHESTRATOR_MIGRATIONS: readonly Migration[] = migrationsFor("postgres");

/** The orchestrator's migrations on `schema`; every orchestrator PostgreSQL module calls it on open. */
export async function migrateOrchestrator(pool: pg.Pool, schema: string): Promise<number[]> {
  return runMigrations({ pool, schema, component: "orchestrator", migrations: ORCHESTRATOR_MIGRATIONS });
}

/**
 * Applies `part`'s migrations a SQLite file lacks (@oz0/sqlite's runner: one
 * IMMEDIATE transaction, a file from before numbered migrations adopted by
 * each migration's `present`). Returns the versions it ran.
 */
export function migrateSqlite(db: Database.Database, part: Exclude<SchemaPart, "cluster">): number[] {
  return runSqliteMigrations({ db, component: "orchestrator", migrations: migrationsFor("sqlite", part) });
}
