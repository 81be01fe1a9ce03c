// A service's tables live in one schema of their own, named by the operator
// (and by each test run, so runs sharing a server never collide). The name
// becomes an identifier in SQL and part of NOTIFY channel names, so it is
// checked rather than quoted.
import { createHash } from "node:crypto";
import pg from "pg";
import { NulReplacingClient } from "./nul-replacement.js";

const PLAIN_IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** A lower-case identifier PostgreSQL takes as written (a schema's, a table's, an index's name), at most 63 characters. */
export function isPlainIdentifier(name: string): boolean {
  return PLAIN_IDENTIFIER.test(name);
}

/** Returns `schema` when it is a plain lower-case identifier; throws saying what a name may be. */
export function checkSchemaName(schema: string): string {
  if (!isPlainIdentifier(schema)) {
    throw new Error(
      `schema name ${JSON.stringify(schema)} must be lower-case letters, digits and underscores, starting with a letter, at most 63 characters`,
    );
  }
  return schema;
}

/**
 * The NOTIFY channel `<schema>_<suffix>`. Channel names are identifiers (at
 * most 63 bytes): a longer one becomes `oz0_<suffix>_<hash of the schema>`.
 */
export function channelName(schema: string, suffix: string): string {
  const plain = `${checkSchemaName(schema)}_${suffix}`;
  return plain.length <= 63 ? plain : `oz0_${suffix}_${createHash("sha256").update(schema).digest("hex").slice(0, 32)}`;
}

export interface SchemaPoolOptions {
  /** A `postgres://` URL (DATABASE_URL). */
  connectionString: string;
  /** The schema unqualified table names resolve in (checked with {@link checkSchemaName}). */
  schema: string;
  /** Pool size. Default 10. */
  maxConnections?: number;
  /**
   * How long a query waits for a connection (a new one, or a free one when the
   * pool is full) before it fails. Default: as long as it takes.
   */
  connectionTimeoutMs?: number;
  /**
   * How long a query may take before it fails on this side, the connection
   * with it (TCP keepalive is on as well). Default: as long as it takes. For
   * work that must notice a silent network in time (lease renewals).
   */
  queryTimeoutMs?: number;
}

/**
 * A pool whose connections resolve unqualified table names in `schema`, and
 * store U+0000 in a parameter as U+FFFD (nul-replacement.ts).
 */
export function createSchemaPool(options: SchemaPoolOptions): pg.Pool {
  const schema = checkSchemaName(options.schema);
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    Client: NulReplacingClient,
    max: options.maxConnections ?? 10,
    // search_path per connection, so SQL names tables without a schema.
    options: `-c search_path=${schema}`,
    ...(options.connectionTimeoutMs !== undefined ? { connectionTimeoutMillis: options.connectionTimeoutMs } : {}),
    ...(options.queryTimeoutMs !== undefined ? { query_timeout: options.queryTimeoutMs, keepAlive: true } : {}),
  });
  // An idle client losing its connection (a server restart) must not crash the process; the next query reconnects.
  pool.on("error", () => undefined);
  return pool;
}

/** Runs `fn` in one transaction: commit when it resolves, roll back when it throws. */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await transactionOn(client, fn);
  } finally {
    client.release();
  }
}

/** {@link withTransaction} on a connection the caller holds (one that holds a session-level lock, say). */
export async function transactionOn<T>(client: pg.PoolClient, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  await client.query("BEGIN");
  try {
    const result = await fn(client);
    await client.query("COMMIT");
    return result;
  } catch (error) {
    await client.query("ROLLBACK").catch(() => undefined);
    throw error;
  }
}
