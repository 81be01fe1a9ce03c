// Numbered migrations that several replicas, and several components sharing
// one schema (the orchestrator and the LLM proxy), may run at once:
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
// `pg_try_advisory_lock`, each try a statement of its own, polled.
import type pg from "pg";
import { checkSchemaName, withTransaction } from "./schema-pool.js";

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
  try {
    await lockPolling(client, lock);
    const ran = await applyPending(client, schema, options.component, options.migrations);
    await client.query("SELECT pg_advisory_unlock(hashtext($1))", [lock]);
    client.release();
    return ran;
  } catch (error) {
    // Closing the connection ends its session, and the session's lock with it.
    client.release(error instanceof Error ? error : new Error(String(error)));
    throw error;
  }
}

async function lockPolling(client: pg.PoolClient, lock: string): Promise<void> {
  for (let waitMs = LOCK_RETRY_MS.first; ; waitMs = Math.min(waitMs * 2, LOCK_RETRY_MS.last)) {
    const tried = await client.query<{ locked: boolean }>("SELECT pg_try_advisory_lock(hashtext($1)) AS locked", [
      lock,
    ]);
    if (tried.rows[0]?.locked) return;
    await new Promise((resolve) => setTimeout(resolve, waitMs));
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
      await buildIndexConcurrently(client, schema, migration.concurrentIndex);
      await record(migration);
    } else {
      await client.query("BEGIN");
      try {
        // The connection's search_path names this schema, but it may not have existed when the connection opened.
        await client.query(`SET LOCAL search_path TO ${schema}`);
        await client.query(migration.sql);
        await record(migration);
        await client.query("COMMIT");
      } catch (error) {
        await client.query("ROLLBACK").catch(() => undefined);
        throw error;
      }
    }
    ran.push(migration.version);
  }
  return ran;
}

async function buildIndexConcurrently(
  client: pg.PoolClient,
  schema: string,
  index: ConcurrentIndexMigration["concurrentIndex"],
): Promise<void> {
  const found = await client.query<{ valid: boolean }>(
    `SELECT i.indisvalid AS valid FROM pg_index i
       JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2`,
    [schema, index.name],
  );
  if (found.rows[0]?.valid) return;
  if (found.rows[0]) await client.query(`DROP INDEX CONCURRENTLY ${schema}.${index.name}`);
  await client.query(
    `CREATE INDEX CONCURRENTLY ${index.name} ON ${schema}.${index.table} (${index.columns.join(", ")})`,
  );
}

/** The index's names become identifiers in SQL: checked, as a schema's name is, rather than quoted. */
function checkIndex(migration: ConcurrentIndexMigration): void {
  const { name, table, columns } = migration.concurrentIndex;
  const names = [name, table, ...columns];
  if (columns.length === 0 || names.some((n) => !/^[a-z_][a-z0-9_]{0,62}$/.test(n))) {
    throw new Error(
      `migration ${migration.version} (${migration.name}): an index's name, table and columns (at least one) must be lower-case letters, digits and underscores, starting with a letter; got ${JSON.stringify(migration.concurrentIndex)}`,
    );
  }
}
