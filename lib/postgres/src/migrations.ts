// Numbered migrations that several replicas, and several components sharing
// one schema (the orchestrator and the LLM proxy), may run at once. Two
// transactions, each under one transaction-scoped advisory lock:
//  1. keyed by the schema: create the schema and `oz0_migrations` when
//     missing. Creating them is check-then-create, and two sessions creating
//     the same schema or table at once collide on the catalogs' unique
//     indexes (pg_namespace, pg_type) even with IF NOT EXISTS; so whoever
//     needs them creates them while holding the schema's lock, and commits
//     before the lock is free.
//  2. keyed by schema and component: apply the component's migrations. The
//     first replica applies them, the others wait and then find every version
//     recorded; another component's migrations do not wait for these.
// DDL is transactional in PostgreSQL, so a replica killed mid-migration
// leaves nothing half applied.
import type pg from "pg";
import { checkSchemaName, withTransaction } from "./schema-pool.js";

export interface Migration {
  version: number;
  /** What it does, stored beside the version for operators. */
  name: string;
  sql: string;
}

/**
 * Applies the migrations of `component` not yet recorded in `schema`, in
 * version order, in one transaction; creates the schema when missing. Safe
 * when many processes call it at once, for one component or several sharing
 * the schema; a no-op once everything is applied. Returns the versions it
 * applied.
 */
export async function runMigrations(options: {
  pool: pg.Pool;
  schema: string;
  component: string;
  migrations: readonly Migration[];
}): Promise<number[]> {
  const schema = checkSchemaName(options.schema);
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
  return withTransaction(options.pool, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`oz0.migrations:${schema}:${options.component}`]);
    // The pool's search_path names this schema, but it may not have existed when the connection opened.
    await client.query(`SET LOCAL search_path TO ${schema}`);
    const applied = await client.query<{ version: number }>("SELECT version FROM oz0_migrations WHERE component = $1", [
      options.component,
    ]);
    const done = new Set(applied.rows.map((r) => r.version));
    const ran: number[] = [];
    for (const migration of [...options.migrations].sort((a, b) => a.version - b.version)) {
      if (done.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query("INSERT INTO oz0_migrations (component, version, name) VALUES ($1, $2, $3)", [
        options.component,
        migration.version,
        migration.name,
      ]);
      ran.push(migration.version);
    }
    return ran;
  });
}
