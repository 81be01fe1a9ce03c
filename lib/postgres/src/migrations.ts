// Numbered migrations that several replicas, and several components sharing
// one schema (whose tables have names of their own: the orchestrator and the
// LLM proxy both have a `session_tokens`, so each has a schema of its own),
// may run at once:
//  1. Under a transaction-scoped advisory lock keyed by the schema: create
//     the schema and `oz0_migrations` when missing. Creating them is
//     check-then-create, and two sessions creating the same schema or table
//     at once collide on the catalogs' unique indexes (pg_namespace, pg_type)
//     even with IF NOT EXISTS; so whoever needs them creates them while
//     holding the schema's lock, and commits before the lock is free.
//  2. Under a session-level advisory lock keyed by schema and component:
//     apply the component's migrations not yet recorded, in version order,
//     each in a transaction with its record (DDL is transactional in
//     PostgreSQL, so a replica killed mid-migration leaves that migration
//     not applied and the ones before it recorded). The first replica
//     applies them, the others wait and then find every version recorded;
//     another component's migrations do not wait for these.
//
// An index on a table that may be large when the migration reaches it (the
// LLM proxy's calls) is built CONCURRENTLY, which does not hold the table's
// writes while it builds but cannot run in a transaction, and waits for
// every transaction that holds a snapshot older than its own. A replica
// waiting in `pg_advisory_lock` holds one, so a replica blocked on the lock
// while another builds would deadlock it: the lock of step 2 is taken with
// `pg_try_advisory_lock`, each try a statement of its own, polled. A replica
// of a version before this one still waits inside a transaction (a rolling
// upgrade), and PostgreSQL then aborts the build as the deadlock's victim:
// the runner drops the invalid index the build left, lets the lock go so the
// older replica can finish, and tries again (a few times) once it has the
// lock back.
import type pg from "pg";
import { setTimeout as sleep } from "node:timers/promises";
import { checkSchemaName, isPlainIdentifier, transactionOn, withTransaction } from "./schema-pool.js";

interface MigrationCommon {
  version: number;
  /** What it does, stored beside the version for operators. */
  name: string;
}

/** Statements applied in one transaction with the version's record. */
export interface SqlMigration extends MigrationCommon {
  sql: string;
}

/**
 * An index built with CREATE INDEX CONCURRENTLY: writes to the table go on
 * while it builds. An index of that name a killed build left invalid is
 * dropped and built again; a valid one (built, then killed before its
 * record) is kept.
 */
export interface ConcurrentIndexMigration extends MigrationCommon {
  concurrentIndex: { name: string; table: string; columns: string[] };
}

export type Migration = SqlMigration | ConcurrentIndexMigration;

/** How long a replica waits between tries for the component's lock, doubling from the first to the last. */
const LOCK_RETRY_MS = { first: 10, last: 250 };
/** How many times an index build PostgreSQL aborted as a deadlock's victim is started again. */
const BUILD_ATTEMPTS = 5;
/** SQLSTATE deadlock_detected. */
const DEADLOCK_DETECTED = "40P01";

/** An index build was a deadlock's victim; its invalid index is gone, and the versions before it applied. */
class BuildDeadlocked extends Error {
  constructor(
    readonly applied: number[],
    cause: unknown,
  ) {
    super("the index build was aborted as a deadlock's victim", { cause });
  }
}

/**
 * Applies the migrations of `component` not yet recorded in `schema`, in
 * version order; creates the schema when missing. Safe when many processes
 * call it at once, for one component or several sharing the schema; a no-op
 * once everything is applied. Returns the versions it applied.
 */
export async function runMigrations(options: {
  pool: pg.Pool;
  schema: string;
  component: string;
  migrations: readonly Migration[];
}): Promise<number[]> {
  const schema = checkSchemaName(options.schema);
  for (const migration of options.migrations) if ("concurrentIndex" in migration) checkIndex(migration);
  await withTransaction(options.pool, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`oz0.migrations:${schema}`]);
    // Only when missing: CREATE SCHEMA IF NOT EXISTS still needs CREATE on the database, which a locked-down role lacks.
    const exists = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
    if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(
      `CREATE TABLE IF NOT EXISTS ${schema}.oz0_migrations (component text NOT NULL, version integer NOT NULL, name text NOT NULL,
       applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))`,
    );
  });
  const client = await options.pool.connect();
  const lock = `oz0.migrations:${schema}:${options.component}`;
  const ran: number[] = [];
  try {
    for (let attempt = 1; ; attempt++) {
      await lockPolling(client, lock);
      try {
        ran.push(...(await applyPending(client, schema, options.component, options.migrations)));
        await unlock(client, lock);
        client.release();
        return ran;
      } catch (error) {
        if (!(error instanceof BuildDeadlocked) || attempt === BUILD_ATTEMPTS) throw error;
        ran.push(...error.applied);
        // The replica the build waited for waits for this lock: it goes first.
        await unlock(client, lock);
        await sleep(100 * attempt);
      }
    }
  } catch (error) {
    // Closing the connection ends its session, and the session's lock with it.
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error instanceof BuildDeadlocked
      ? new Error(
          `could not build an index: PostgreSQL aborted the build as a deadlock's victim ${BUILD_ATTEMPTS} times (a replica of an older version waiting for the migrations' lock holds what it waits for); start again once every replica runs this version`,
          { cause: error.cause },
        )
      : error;
  }
}

async function unlock(client: pg.PoolClient, lock: string): Promise<void> {
  const done = await client.query<{ unlocked: boolean }>("SELECT pg_advisory_unlock(hashtext($1)) AS unlocked", [lock]);
  if (!done.rows[0]?.unlocked) throw new Error(`the migrations' lock ${lock} was not held by this connection any more`);
}

async function lockPolling(client: pg.PoolClient, lock: string): Promise<void> {
  for (let waitMs = LOCK_RETRY_MS.first; ; waitMs = Math.min(waitMs * 2, LOCK_RETRY_MS.last)) {
    const tried = await client.query<{ locked: boolean }>("SELECT pg_try_advisory_lock(hashtext($1)) AS locked", [
      lock,
    ]);
    if (tried.rows[0]?.locked) return;
    await sleep(waitMs);
  }
}

async function applyPending(
  client: pg.PoolClient,
  schema: string,
  component: string,
  migrations: readonly Migration[],
): Promise<number[]> {
  const applied = await client.query<{ version: number }>(
    `SELECT version FROM ${schema}.oz0_migrations WHERE component = $1`,
    [component],
  );
  const done = new Set(applied.rows.map((r) => r.version));
  const ran: number[] = [];
  const record = (migration: Migration) =>
    client.query(`INSERT INTO ${schema}.oz0_migrations (component, version, name) VALUES ($1, $2, $3)`, [
      component,
      migration.version,
      migration.name,
    ]);
  for (const migration of [...migrations].sort((a, b) => a.version - b.version)) {
    if (done.has(migration.version)) continue;
    if ("concurrentIndex" in migration) {
      try {
        await buildIndexConcurrently(client, schema, migration);
      } catch (error) {
        if ((error as { code?: unknown }).code !== DEADLOCK_DETECTED) throw error;
        await dropInvalidIndex(client, schema, migration.concurrentIndex.name);
        throw new BuildDeadlocked(ran, error);
      }
      await record(migration);
    } else {
      try {
        await transactionOn(client, async () => {
          // The connection's search_path names this schema, but it may not have existed when the connection opened.
          await client.query(`SET LOCAL search_path TO ${schema}`);
          await client.query(migration.sql);
          await record(migration);
        });
      } catch (error) {
        throw await withSchemaSharers(client, { schema, component, migration, error });
      }
    }
    ran.push(migration.version);
  }
  return ran;
}

/** SQLSTATE duplicate_table, duplicate_object, duplicate_function. */
const DUPLICATE_NAME = new Set(["42P07", "42710", "42723"]);

/**
 * A migration that failed on a name already taken, in a schema another
 * component migrates too: what to do (give this one a schema of its own)
 * rather than PostgreSQL's "relation already exists" alone.
 */
async function withSchemaSharers(
  client: pg.PoolClient,
  failed: { schema: string; component: string; migration: Migration; error: unknown },
): Promise<unknown> {
  const { schema, component, migration, error } = failed;
  if (!DUPLICATE_NAME.has((error as { code?: string }).code ?? "")) return error;
  const others = await client.query<{ component: string }>(
    `SELECT DISTINCT component FROM ${schema}.oz0_migrations WHERE component <> $1 ORDER BY component`,
    [component],
  );
  if (others.rows.length === 0) return error;
  return new Error(
    `migration ${migration.version} (${migration.name}) of ${component} failed in schema ${schema}: ${(error as Error).message}; the schema holds the tables of ${others.rows.map((r) => r.component).join(", ")} as well, whose names may be the same: give ${component} a schema of its own (OZ0_DATABASE_SCHEMA)`,
    { cause: error },
  );
}

/** An index as the catalogs describe it; `plain`: a btree, not unique, on columns only, whole table. */
interface IndexFound {
  valid: boolean;
  definition: string;
  table: string;
  columns: string[];
  plain: boolean;
}

/** What an index of the schema is, by name: undefined when there is none. */
async function indexNamed(client: pg.PoolClient, schema: string, name: string): Promise<IndexFound | undefined> {
  const found = await client.query<IndexFound>(
    `SELECT i.indisvalid AS valid, pg_get_indexdef(i.indexrelid) AS definition, t.relname AS table,
            ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
                    JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n) AS columns,
            NOT i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL AND am.amname = 'btree' AS plain
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN pg_class t ON t.oid = i.indrelid JOIN pg_am am ON am.oid = c.relam
      WHERE n.nspname = $1 AND c.relname = $2`,
    [schema, name],
  );
  return found.rows[0];
}

const dropIndex = (client: pg.PoolClient, schema: string, name: string) =>
  client.query(`DROP INDEX CONCURRENTLY "${schema}"."${name}"`);

async function dropInvalidIndex(client: pg.PoolClient, schema: string, name: string): Promise<void> {
  if ((await indexNamed(client, schema, name))?.valid === false) await dropIndex(client, schema, name);
}

async function buildIndexConcurrently(
  client: pg.PoolClient,
  schema: string,
  migration: ConcurrentIndexMigration,
): Promise<void> {
  const { name, table, columns } = migration.concurrentIndex;
  const found = await indexNamed(client, schema, name);
  if (found?.valid) {
    // Built, and its replica stopped before the record: kept. Any other index of that name is not this one.
    const same = found.plain && found.table === table && found.columns.join(",") === columns.join(",");
    if (same) return;
    throw new Error(
      `migration ${migration.version} (${migration.name}): schema ${schema} has an index ${name} that is not the one this migration builds (on ${table} (${columns.join(", ")})): ${found.definition}; drop or rename it, then start again`,
    );
  }
  if (found) await dropIndex(client, schema, name);
  // A build takes as long as the table is large: no timeout the role or database sets applies to it.
  await client.query("SET statement_timeout = 0; SET lock_timeout = 0");
  try {
    await client.query(
      `CREATE INDEX CONCURRENTLY "${name}" ON "${schema}"."${table}" (${columns.map((c) => `"${c}"`).join(", ")})`,
    );
  } finally {
    await client.query("RESET statement_timeout; RESET lock_timeout");
  }
}

/** The index's names become identifiers in SQL: checked, as a schema's name is, and quoted. */
function checkIndex(migration: ConcurrentIndexMigration): void {
  const { name, table, columns } = migration.concurrentIndex;
  const names = [name, table, ...columns];
  if (columns.length === 0 || !names.every(isPlainIdentifier)) {
    throw new Error(
      `migration ${migration.version} (${migration.name}): an index's name, table and columns (at least one) must be lower-case letters, digits and underscores, starting with a letter or an underscore; got ${JSON.stringify(migration.concurrentIndex)}`,
    );
  }
}
