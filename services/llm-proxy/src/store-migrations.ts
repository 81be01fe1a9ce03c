// The proxy store's schema as one list of numbered migrations for both
// engines, written once with Kysely's schema builder and compiled for each
// (a time is timestamptz on PostgreSQL and INTEGER milliseconds on SQLite, a
// flag boolean or INTEGER 0/1, and so on: `ColumnTypes`). Append only: never
// edit one that has been applied somewhere.
//
// PostgreSQL applies them with @oz0/postgres's runMigrations (an advisory
// lock, so replicas starting together apply each once), recorded in
// `oz0_migrations` under the component `llm-proxy`: versions 1-4 are the ones
// the store's raw SQL migrations applied before, so a database they migrated
// is recognised and migrated forward. Budgets are rows there only (SQLite's
// live in the one proxy's memory), so those migrations are PostgreSQL's.
//
// A SQLite file records its versions in an `oz0_migrations` table of its own.
// A file from before (its schema made by CREATE TABLE IF NOT EXISTS and ALTERs
// at each open) is adopted first: each migration's `present` probe says
// whether the file already has what it makes, and those are recorded as
// applied without running. Files made before the tables a call writes were
// WITHOUT ROWID (4bb2c2c) keep their rowid tables: the columns, keys and
// indexes are the same and so is every statement.
import type Database from "better-sqlite3";
import { runMigrations, type Migration } from "@oz0/postgres";
import { runSqliteMigrations, type SchemaProbe, type SqliteMigration } from "@oz0/sqlite";
import { sql, type ColumnDataType, type Compilable, type CreateTableBuilder, type Kysely } from "kysely";
import type pg from "pg";
import { COMPILERS, type EngineName } from "./store-sql.js";

/** Migrations use Kysely's schema builder only: no table types. */
type SchemaOnly = Record<string, never>;
type Table = CreateTableBuilder<string, string>;

/** Column types by engine, as the stores' values are encoded (store-rows.ts). */
interface ColumnTypes {
  engine: EngineName;
  time: ColumnDataType;
  bool: ColumnDataType;
  /** Token counts. */
  count: ColumnDataType;
  real: ColumnDataType;
  bytes: ColumnDataType;
}

const TYPES: Record<EngineName, ColumnTypes> = {
  postgres: {
    engine: "postgres",
    time: "timestamptz",
    bool: "boolean",
    count: "bigint",
    real: "double precision",
    bytes: "bytea",
  },
  sqlite: { engine: "sqlite", time: "integer", bool: "integer", count: "integer", real: "real", bytes: "blob" },
};

interface ProxyMigration {
  version: number;
  name: string;
  /** Engines it runs on; default both. */
  only?: EngineName;
  /** The statements, built for the engine (a string: SQL Kysely's schema builder cannot make). */
  up(db: Kysely<SchemaOnly>, t: ColumnTypes): (Compilable | string)[];
  /** On a SQLite file from before numbered migrations: it already has what this makes. */
  present?(probe: SchemaProbe): boolean;
  /**
   * An index on a table that may be large by the time the migration reaches
   * it: PostgreSQL builds it CONCURRENTLY, so calls go on being metered while
   * it builds (`up` makes it on SQLite, whose file has one writer anyway).
   */
  concurrentIndex?: { name: string; table: string; columns: string[] };
}

/**
 * Adds `columns` to `table` in order: `name type` with type one of SQL's
 * (text, integer, numeric) or a ColumnTypes key, then `!` for NOT NULL.
 */
function withColumns(table: Table, t: ColumnTypes, columns: string): Table {
  for (const column of columns.trim().split(/,\s*/)) {
    const [, name, type, notNull] = /^(\w+) (\w+)(!?)$/.exec(column) ?? [];
    if (!name || !type) throw new Error(`migration column ${JSON.stringify(column)} is not "name type[!]"`);
    const engineType = (t as unknown as Record<string, ColumnDataType | undefined>)[type] ?? (type as ColumnDataType);
    table = table.addColumn(name, engineType, (c) => (notNull ? c.notNull() : c));
  }
  return table;
}

/** A table each call writes: on SQLite WITHOUT ROWID, one b-tree by its TEXT key instead of two (fewer WAL pages a commit). */
const keyedByText = (table: Table, t: ColumnTypes): Table =>
  t.engine === "sqlite" ? table.modifyEnd(sql`without rowid`) : table;

const IDENTITY = "operation_id text!, job text!, agent text!, session text!, provider text!, model text!, wire text!";
const METERING = `${IDENTITY}, stream bool!, status integer!, outcome text!, input_tokens count!, output_tokens count!,
  cache_read_tokens count!, cache_write_tokens count!, reasoning_tokens count!, cost_usd real!, latency_ms real!,
  ttft_ms real, estimated bool!, started_at time!`;

/**
 * The reservation function (see version 2): `startingPoint` is how a first
 * reservation opens an account, the one part later versions change.
 */
function reserveBudgetFunction(create: "CREATE" | "CREATE OR REPLACE", startingPoint: string): string {
  return `${create} FUNCTION reserve_budget(p_id text, p_session text, p_limit numeric, p_worst numeric, p_minimum numeric, p_partial boolean, p_hold_ms double precision)
RETURNS TABLE (o_amount numeric, o_limit numeric, o_spent numeric, o_reserved numeric)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  a budget_accounts%ROWTYPE;
  available numeric;
  amount numeric;
BEGIN
  SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  IF NOT FOUND THEN
${startingPoint}
    SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  END IF;
  available := a.limit_usd - a.spent_usd - a.reserved_usd;
  IF available <= 0 OR available < p_minimum OR (NOT p_partial AND p_worst > available) THEN
    RETURN QUERY SELECT NULL::numeric, a.limit_usd, a.spent_usd, a.reserved_usd;
    RETURN;
  END IF;
  amount := LEAST(p_worst, available);
  UPDATE budget_accounts SET reserved_usd = reserved_usd + amount WHERE session = p_session;
  INSERT INTO budget_reservations (id, session, amount_usd, state, created_at, expires_at)
    VALUES (p_id, p_session, amount, 'held', now(), now() + p_hold_ms * interval '1 millisecond');
  RETURN QUERY SELECT amount, a.limit_usd, a.spent_usd, a.reserved_usd + amount;
END
$fn$`;
}

export const MIGRATIONS: readonly ProxyMigration[] = [
  {
    version: 1,
    name: "secrets, session tokens, metering, budgets",
    // On SQLite each IF NOT EXISTS, as the files from before made them: an adopted file gains what it lacks.
    up: (db, t) => {
      const sqlite = t.engine === "sqlite";
      const createTable = (name: string): Table =>
        sqlite ? db.schema.createTable(name).ifNotExists() : db.schema.createTable(name);
      const createIndex = (name: string) =>
        sqlite ? db.schema.createIndex(name).ifNotExists() : db.schema.createIndex(name);
      return [
        withColumns(
          createTable("secrets").addColumn("name", "text", (c) => c.primaryKey()),
          t,
          "iv bytes!, ciphertext bytes!, tag bytes!, created_at time!, updated_at time!",
        ),
        withColumns(
          createTable("session_tokens").addColumn("hash", "text", (c) => c.primaryKey()),
          t,
          "job text!, agent text!, session text!, budget_usd real!, created_at time!, revoked_at time",
        ),
        createIndex("session_tokens_by_session").on("session_tokens").column("session"),
        keyedByText(
          withColumns(createTable("attempts"), t, `${METERING}, attempt integer!`).addPrimaryKeyConstraint(
            "attempts_pkey",
            ["operation_id", "attempt"],
          ),
          t,
        ),
        createIndex("attempts_by_job").on("attempts").column("job"),
        keyedByText(
          withColumns(createTable("calls"), t, `${METERING}, attempts integer!`).addPrimaryKeyConstraint("calls_pkey", [
            "operation_id",
          ]),
          t,
        ),
        createIndex("calls_by_job").on("calls").column("job"),
        createIndex("calls_by_session").on("calls").column("session"),
        // Budgets are rows on PostgreSQL only: every replica reserves against the same account.
        ...(t.engine === "postgres"
          ? [
              withColumns(
                createTable("budget_accounts").addColumn("session", "text", (c) => c.primaryKey()),
                t,
                "limit_usd numeric!, spent_usd numeric!, reserved_usd numeric!",
              ),
              // state: held (counted in reserved_usd), settled, or expired (freed by the sweep; a late settle still counts its spend).
              withColumns(
                createTable("budget_reservations").addColumn("id", "text", (c) => c.primaryKey()),
                t,
                "session text!, amount_usd numeric!, state text!, actual_usd numeric, created_at time!, expires_at time!",
              ),
              db.schema
                .createIndex("budget_reservations_held")
                .on("budget_reservations")
                .column("expires_at")
                .where(sql.ref("state"), "=", "held"),
            ]
          : []),
      ];
    },
  },
  {
    version: 2,
    name: "budget reservations in one round trip",
    only: "postgres",
    // Each function is one transaction's worth of locking: the account row is
    // locked from the decision to the hold. A settled reservation is deleted
    // (a second settle finds nothing); only holds in flight and expired ones stay.
    // search_path is fixed at creation, so the functions find this schema's tables.
    up: (db) => [
      db.schema.createIndex("budget_reservations_by_session").on("budget_reservations").column("session"),
      reserveBudgetFunction(
        "CREATE",
        `    -- A first reservation starts from what the session's calls were charged (a restart, a forgotten account).
    INSERT INTO budget_accounts (session, limit_usd, spent_usd, reserved_usd)
      SELECT p_session, p_limit, COALESCE(SUM(c.cost_usd), 0)::numeric, 0 FROM calls c WHERE c.session = p_session
      ON CONFLICT (session) DO NOTHING;`,
      ),
      `CREATE FUNCTION settle_budget(p_id text, p_actual numeric) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  r budget_reservations%ROWTYPE;
BEGIN
  DELETE FROM budget_reservations WHERE id = p_id RETURNING * INTO r;
  IF NOT FOUND OR r.state = 'settled' THEN RETURN; END IF;
  -- An expired hold was already given back by the sweep: only the spend is left to count.
  UPDATE budget_accounts
    SET reserved_usd = reserved_usd - CASE WHEN r.state = 'held' THEN r.amount_usd ELSE 0 END, spent_usd = spent_usd + p_actual
    WHERE session = r.session;
END
$fn$`,
      "DELETE FROM budget_reservations WHERE state = 'settled'",
    ],
  },
  {
    version: 3,
    name: "a session token's first use",
    // Nothing recorded the use of the tokens already there: count them used, which claims nothing false.
    up: (db, t) => [
      db.schema.alterTable("session_tokens").addColumn("used_at", t.time),
      "UPDATE session_tokens SET used_at = created_at",
    ],
    present: (probe) => probe.hasColumn("session_tokens", "used_at"),
  },
  {
    version: 4,
    name: "calls in flight, reconciled as interrupted when their replica is gone",
    // One row per call in flight, written before its first attempt is sent and deleted with the call's
    // record. What makes it an orphan is where the engines differ: on SQLite the row names the process
    // that owns it, and a later start reconciles another's; on PostgreSQL its replica renews
    // expires_at with its budget holds, and once it lapses any replica turns the row into an interrupted call.
    up: (db, t) => [
      keyedByText(
        withColumns(
          db.schema.createTable("pending_calls").addColumn("operation_id", "text", (c) => c.primaryKey()),
          t,
          `${IDENTITY.replace("operation_id text!, ", "")}, stream bool!, attempt integer!, started_at time!,
           attempt_started_at time!, reservation_id text, ${t.engine === "sqlite" ? "owner text!" : "expires_at time!"}`,
        ),
        t,
      ),
      ...(t.engine === "postgres"
        ? [db.schema.createIndex("pending_calls_by_expiry").on("pending_calls").column("expires_at")]
        : []),
    ],
    present: (probe) => probe.hasTable("pending_calls"),
  },
  {
    version: 5,
    name: "a session token spending another session's budget",
    // A harness operation's scratch session spends its parent session's budget: the account is named by
    // budget_session, and its starting point counts every session that spends from it.
    // Indexed: every budget account opened (a session's first budgeted call) looks up the sessions spending from it.
    up: (db) => [
      db.schema.alterTable("session_tokens").addColumn("budget_session", "text"),
      db.schema.createIndex("session_tokens_by_budget_session").on("session_tokens").column("budget_session"),
    ],
    present: (probe) => probe.hasColumn("session_tokens", "budget_session"),
  },
  {
    version: 6,
    name: "a budget account's starting point counts the sessions spending from it",
    only: "postgres",
    up: () => [
      reserveBudgetFunction(
        "CREATE OR REPLACE",
        `    -- A first reservation starts from what the account's calls were charged (a restart, a forgotten account):
    -- its own session's, and those of every session spending from it (a harness operation's scratch sessions).
    INSERT INTO budget_accounts (session, limit_usd, spent_usd, reserved_usd)
      SELECT p_session, p_limit, COALESCE(SUM(c.cost_usd), 0)::numeric, 0 FROM calls c
      WHERE c.session = p_session
         OR c.session IN (SELECT t.session FROM session_tokens t WHERE t.budget_session = p_session)
      ON CONFLICT (session) DO NOTHING;`,
      ),
    ],
  },
  {
    version: 7,
    name: "calls by when they started",
    // Usage across jobs over a window (SummarizeUsage: what the agents spent today) reads the calls by start.
    // First applied as a plain CREATE INDEX on both engines; the index it leaves is the same.
    up: (db) => [db.schema.createIndex("calls_by_start").on("calls").column("started_at")],
    concurrentIndex: { name: "calls_by_start", table: "calls", columns: ["started_at"] },
  },
  {
    version: 8,
    name: "the trace a session token was minted in",
    // A model call's span goes in its session's trace, not in whichever one its harness names (tracing.ts).
    up: (db) => [db.schema.alterTable("session_tokens").addColumn("traceparent", "text")],
    present: (probe) => probe.hasColumn("session_tokens", "traceparent"),
  },
  {
    version: 9,
    name: "the most model calls a session may make",
    // The limit rides with the token (null on tokens from before: none). The count is a row per session on
    // PostgreSQL, locked for the check and the count (count_model_call), so replicas together never pass the
    // limit; SQLite's one proxy counts in memory (model-call-ledger.ts) from the same starting point.
    up: (db, t) => [
      db.schema.alterTable("session_tokens").addColumn("max_model_calls", "integer"),
      ...(t.engine === "postgres"
        ? [
            withColumns(
              db.schema.createTable("model_call_counts").addColumn("session", "text", (c) => c.primaryKey()),
              t,
              "made_calls integer!",
            ),
            `CREATE FUNCTION count_model_call(p_session text, p_limit integer)
RETURNS TABLE (o_counted boolean, o_made integer)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  v_made integer;
BEGIN
  SELECT c.made_calls INTO v_made FROM model_call_counts c WHERE c.session = p_session FOR UPDATE;
  IF NOT FOUND THEN
    -- A first call starts from the session's calls that were sent: on record with an attempt (a refused call has
    -- none), or in flight at any replica (a count forgotten at a revocation while calls were still running).
    INSERT INTO model_call_counts (session, made_calls)
      SELECT p_session,
        (SELECT count(*) FROM calls c WHERE c.session = p_session AND c.attempts > 0)
        + (SELECT count(*) FROM pending_calls p WHERE p.session = p_session)
      ON CONFLICT (session) DO NOTHING;
    SELECT c.made_calls INTO v_made FROM model_call_counts c WHERE c.session = p_session FOR UPDATE;
  END IF;
  IF v_made >= p_limit THEN
    RETURN QUERY SELECT false, v_made;
    RETURN;
  END IF;
  UPDATE model_call_counts SET made_calls = v_made + 1 WHERE session = p_session;
  RETURN QUERY SELECT true, v_made + 1;
END
$fn$`,
          ]
        : []),
    ],
    present: (probe) => probe.hasColumn("session_tokens", "max_model_calls"),
  },
];

/** A migration's statements, compiled for the engine. */
function sqlOf(migration: ProxyMigration, engine: EngineName): string {
  return migration
    .up(COMPILERS[engine] as unknown as Kysely<SchemaOnly>, TYPES[engine])
    .map((statement) => `${typeof statement === "string" ? statement : statement.compile().sql};`)
    .join("\n");
}

const appliesTo = (engine: EngineName) => (m: ProxyMigration) => !m.only || m.only === engine;

/** Every migration PostgreSQL applies: SQL, or an index built concurrently. */
export const POSTGRES_MIGRATIONS: readonly Migration[] = MIGRATIONS.filter(appliesTo("postgres")).map((m) =>
  m.concurrentIndex
    ? { version: m.version, name: m.name, concurrentIndex: m.concurrentIndex }
    : { version: m.version, name: m.name, sql: sqlOf(m, "postgres") },
);
/** SQLite's, each with its probe for adopting a file from before numbered migrations. */
const SQLITE_MIGRATIONS: readonly SqliteMigration[] = MIGRATIONS.filter(appliesTo("sqlite")).map((m) => ({
  version: m.version,
  name: m.name,
  sql: sqlOf(m, "sqlite"),
  ...(m.present ? { present: m.present } : {}),
}));

/** Applies the migrations the schema lacks, under an advisory lock; returns the versions it ran. */
export function migratePostgres(pool: pg.Pool, schema: string): Promise<number[]> {
  return runMigrations({ pool, schema, component: "llm-proxy", migrations: POSTGRES_MIGRATIONS });
}

/**
 * Applies the migrations a SQLite file lacks (@oz0/sqlite's runner: one
 * IMMEDIATE transaction, a file from before numbered migrations adopted by
 * each migration's `present`). Returns the versions it ran.
 */
export function migrateSqlite(db: Database.Database): number[] {
  return runSqliteMigrations({ db, component: "llm-proxy", migrations: SQLITE_MIGRATIONS });
}
