// Publishing a definition (an agent's, a graph's) as the next version of its
// name, unless its content hash equals the latest one's: then the latest is
// the answer and nothing is written. Replicas publishing one name at once
// would both read the same latest version, so one waits on an advisory lock
// keyed by the kind and the name.
import { withTransaction } from "@oz0/postgres";
import type pg from "pg";

/** The tables holding versions; each has name, version, content_hash and published_at columns. */
export type PostgresVersionTable = "agent_versions" | "graph_versions";

// The lock keys replicas have always used, so a rolling upgrade keeps them exclusive.
const LOCK_PREFIX: Record<PostgresVersionTable, string> = { agent_versions: "oz0.agent", graph_versions: "oz0.graph" };

export interface PostgresVersionRow {
  name: string;
  version: number;
  content_hash: string;
  published_at: Date;
}

/** `columns` are the row's other columns, values ready for `pg` (JSON already a string). */
export async function publishPostgresVersion<Row extends PostgresVersionRow>(
  pool: pg.Pool,
  options: { table: PostgresVersionTable; name: string; contentHash: string; columns: Record<string, string | number> },
): Promise<{ row: Row; published: boolean }> {
  const { table, name, contentHash } = options;
  return withTransaction(pool, async (client) => {
    await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`${LOCK_PREFIX[table]}:${name}`]);
    const latest = (
      await client.query<Row>(`SELECT * FROM ${table} WHERE name = $1 ORDER BY version DESC LIMIT 1`, [name])
    ).rows[0];
    if (latest && latest.content_hash === contentHash) return { row: latest, published: false };
    const values: Record<string, string | number> = {
      name,
      version: (latest?.version ?? 0) + 1,
      content_hash: contentHash,
      ...options.columns,
    };
    const columns = Object.keys(values);
    const inserted = await client.query<Row>(
      `INSERT INTO ${table} (${columns.join(", ")}, published_at) VALUES (${columns.map((_, i) => `$${i + 1}`).join(", ")}, now()) RETURNING *`,
      Object.values(values),
    );
    return { row: inserted.rows[0]!, published: true };
  });
}
