// The queries both proxy stores run, written once with Kysely and compiled
// once per engine (store-sql.ts): secrets, session tokens, metering records
// and their reads. Each is SQL text whose parameters come in the order its
// comment gives. What the engines truly do differently stays in their
// stores: SQLite's calls in flight are owned by a process and committed a
// turn at a time in one synchronous transaction; PostgreSQL's are claimed
// until a time, batched into one statement a turn (postgres-group-commit.ts),
// NOTIFY other replicas of secret and token changes, and keep budgets as rows.
import { sql, type InsertQueryBuilder, type InsertResult } from "kysely";
import {
  COMPILERS,
  compiled,
  namedValues,
  param,
  type EngineName,
  type ProxyDb,
  type ProxyTables,
} from "./store-sql.js";
import { METERING_COLUMNS } from "./store-rows.js";

/** The columns of a metering insert, in the order meteringValues gives them, then the attempt or attempt count. */
export const ATTEMPT_COLUMNS = [...METERING_COLUMNS, "attempt"] as const;
export const CALL_COLUMNS = [...METERING_COLUMNS, "attempts"] as const;
/** A session token's row, as putToken takes its values (and a slot holds them: in-flight-slots.ts). */
export const TOKEN_COLUMNS = [
  "hash",
  "job",
  "agent",
  "session",
  "budget_usd",
  "created_at",
  "budget_session",
  "traceparent",
  "max_model_calls",
] as const;

/** INSERT of metering rows (values in ATTEMPT_COLUMNS or CALL_COLUMNS order). */
export function insertMetering(
  db: ProxyDb,
  table: "attempts" | "calls",
  rows: readonly Record<string, unknown>[],
): InsertQueryBuilder<ProxyTables, typeof table, InsertResult> {
  return db.insertInto(table).values(rows as never);
}

/** A record's values as the row `insertMetering` takes. */
export function meteringRow(columns: readonly string[], values: readonly unknown[]): Record<string, unknown> {
  return Object.fromEntries(columns.map((column, i) => [column, values[i]]));
}

/** Sets or replaces a secret: (name, iv, ciphertext, tag, now, now). */
export const upsertSecret = (db: ProxyDb) =>
  db
    .insertInto("secrets")
    .values({
      name: param("name"),
      iv: param("iv"),
      ciphertext: param("ciphertext"),
      tag: param("tag"),
      created_at: param("now"),
      updated_at: param("now"),
    })
    .onConflict((oc) =>
      oc.column("name").doUpdateSet((eb) => ({
        iv: eb.ref("excluded.iv"),
        ciphertext: eb.ref("excluded.ciphertext"),
        tag: eb.ref("excluded.tag"),
        updated_at: eb.ref("excluded.updated_at"),
      })),
    );
export const UPSERT_SECRET_PARAMETERS = ["name", "iv", "ciphertext", "tag", "now", "now"];

/** Revokes the live tokens of a hash or a session, returning them: (now, hash, session). */
export const revokeMatching = (db: ProxyDb) =>
  db
    .updateTable("session_tokens")
    .set({ revoked_at: param("now") })
    .where("revoked_at", "is", null)
    .where((eb) => eb.or([eb("hash", "=", param("hash")), eb("session", "=", param("session"))]))
    .returningAll();
export const REVOKE_PARAMETERS = ["now", "hash", "session"];

export const deleteSecret = (db: ProxyDb) => db.deleteFrom("secrets").where("name", "=", param("name"));

/** The calls' usage per agent (a UsageRow each), for a WHERE to choose which calls. */
function usageByAgent(db: ProxyDb, postgres: boolean) {
  return db
    .selectFrom("calls")
    .select((eb) => [
      "agent",
      eb.fn.countAll().as("calls"),
      sql`sum(case when outcome = 'ok' then 0 else 1 end)`.as("failed_calls"),
      eb.fn.sum("attempts").as("attempts"),
      eb.fn.sum("input_tokens").as("input"),
      eb.fn.sum("output_tokens").as("output"),
      eb.fn.sum("cache_read_tokens").as("cache_read"),
      eb.fn.sum("cache_write_tokens").as("cache_write"),
      eb.fn.sum("reasoning_tokens").as("reasoning"),
      eb.fn.sum("cost_usd").as("cost"),
      // The same answers in each engine's words: SQLite's booleans are 0/1 and it has no arrays.
      (postgres ? sql`bool_or(estimated)` : sql`max(estimated)`).as("estimated"),
      (postgres ? sql`array_agg(distinct provider order by provider)` : sql`group_concat(distinct provider)`).as(
        "providers",
      ),
    ])
    .groupBy("agent")
    .orderBy("agent");
}

/** Each query's SQL for one engine. */
export interface ProxyQueries {
  /** (name) */
  readonly getSecret: string;
  /** () name, created_at, updated_at by name */
  readonly listSecrets: string;
  /** (TOKEN_COLUMNS) */
  readonly putToken: string;
  /** (hash) */
  readonly findToken: string;
  /** (now, hash): the token's row, marked used, unless it is unknown or revoked. */
  readonly useToken: string;
  /** (hash, session): how many tokens match, and how many of those were used. */
  readonly tokenUse: string;
  /** (ATTEMPT_COLUMNS) */
  readonly insertAttempt: string;
  /** (CALL_COLUMNS) */
  readonly insertCall: string;
  /** (job) oldest first */
  readonly listAttempts: string;
  /** (job) oldest first */
  readonly listCalls: string;
  /** (job) UsageRow per agent */
  readonly usageByAgent: string;
  /** (since, until) UsageRow per agent, of the calls that started in [since, until) */
  readonly usageByAgentBetween: string;
  /** (session) cost */
  readonly chargedToSession: string;
  /** (session) made: the session's calls on record that were sent upstream (an attempt made; a refused call has none) */
  readonly modelCallsOnRecord: string;
}

export function proxyQueries(engine: EngineName): ProxyQueries {
  const db = COMPILERS[engine];
  const postgres = engine === "postgres";
  return {
    getSecret: compiled(db.selectFrom("secrets").selectAll().where("name", "=", param("name")), ["name"]),
    listSecrets: compiled(db.selectFrom("secrets").select(["name", "created_at", "updated_at"]).orderBy("name"), []),
    putToken: compiled(db.insertInto("session_tokens").values(namedValues(TOKEN_COLUMNS)), TOKEN_COLUMNS),
    findToken: compiled(db.selectFrom("session_tokens").selectAll().where("hash", "=", param("hash")), ["hash"]),
    // The row lock (PostgreSQL) or the one writer (SQLite) orders it against a revocation: after one commits, the other sees it.
    useToken: compiled(
      db
        .updateTable("session_tokens")
        .set({ used_at: sql`coalesce(used_at, ${param("now")})` as never })
        .where("hash", "=", param("hash"))
        .where("revoked_at", "is", null)
        .returningAll(),
      ["now", "hash"],
    ),
    tokenUse: compiled(
      db
        .selectFrom("session_tokens")
        .select([
          sql<number>`cast(count(*) as integer)`.as("matched"),
          sql<number>`cast(count(used_at) as integer)`.as("used"),
        ])
        .where((eb) => eb.or([eb("hash", "=", param("hash")), eb("session", "=", param("session"))])),
      ["hash", "session"],
    ),
    insertAttempt: compiled(insertMetering(db, "attempts", [namedValues(ATTEMPT_COLUMNS)]), ATTEMPT_COLUMNS),
    insertCall: compiled(insertMetering(db, "calls", [namedValues(CALL_COLUMNS)]), CALL_COLUMNS),
    listAttempts: compiled(
      db
        .selectFrom("attempts")
        .selectAll()
        .where("job", "=", param("job"))
        .orderBy("started_at")
        .orderBy("operation_id")
        .orderBy("attempt"),
      ["job"],
    ),
    listCalls: compiled(
      db.selectFrom("calls").selectAll().where("job", "=", param("job")).orderBy("started_at").orderBy("operation_id"),
      ["job"],
    ),
    usageByAgent: compiled(usageByAgent(db, postgres).where("job", "=", param("job")), ["job"]),
    usageByAgentBetween: compiled(
      usageByAgent(db, postgres).where("started_at", ">=", param("since")).where("started_at", "<", param("until")),
      ["since", "until"],
    ),
    // A budget account's starting point: its own session's calls and those of every session spending from it.
    chargedToSession: compiled(
      db
        .selectFrom("calls")
        .select(sql<number>`coalesce(sum(cost_usd), 0)`.as("cost"))
        .where((eb) =>
          eb.or([
            eb("session", "=", param("session")),
            eb(
              "session",
              "in",
              eb.selectFrom("session_tokens").select("session").where("budget_session", "=", param("session")),
            ),
          ]),
        ),
      // Named twice: each engine takes its parameters by position.
      ["session", "session"],
    ),
    // A count of model calls' starting point (calls_by_session): a call refused before it was sent has no attempt.
    modelCallsOnRecord: compiled(
      db
        .selectFrom("calls")
        .select(sql<number>`cast(count(*) as integer)`.as("made"))
        .where("session", "=", param("session"))
        .where("attempts", ">", sql.lit(0)),
      ["session"],
    ),
  };
}
