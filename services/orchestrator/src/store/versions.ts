// Publishing a definition (an agent's, a graph's) as the next version of its
// name, unless its content hash equals the latest one's: then the latest is
// the answer and nothing is written. One transaction; on PostgreSQL,
// replicas publishing one name at once would both read the same latest
// version, so the store passes `lock` (an advisory lock keyed by the kind
// and the name, postgres-locks.ts); SQLite has one writer. Reading a
// version, or every name at its latest, is the same query on both tables.
import type { Selectable, Transaction } from "kysely";
import { compiledOnce } from "./compiled-once.js";
import type { Db, SqlEngine, Tables, VersionsTable } from "./sql-database.js";

/** The tables holding versions; each has name, version, content_hash and published_at columns. */
export type VersionTable = "agent_versions" | "graph_versions";

export interface PublishOptions<T extends VersionTable> {
  table: T;
  /** The row's columns but version and published_at, JSON as text. */
  row: Omit<Tables[T], "version" | "published_at">;
  /** Taken first in the transaction; PostgreSQL's serializes publishers of one name. */
  lock?: (trx: Transaction<Tables>, key: string) => Promise<void>;
}

// The lock keys replicas have always used, so a rolling upgrade keeps them exclusive.
const LOCK_PREFIX: Record<VersionTable, string> = { agent_versions: "oz0.agent", graph_versions: "oz0.graph" };

export async function publishVersion<T extends VersionTable>(
  db: Db,
  engine: SqlEngine,
  options: PublishOptions<T>,
): Promise<{ row: Selectable<Tables[T]>; published: boolean }> {
  // One query shape for both tables: Kysely's types cannot follow a table chosen at run time.
  const table = options.table as "graph_versions";
  const row = options.row as Omit<VersionsTable, "version" | "published_at">;
  return db.transaction().execute(async (trx) => {
    await options.lock?.(trx, `${LOCK_PREFIX[options.table]}:${row.name}`);
    const latest = await trx
      .selectFrom(table)
      .selectAll()
      .where("name", "=", row.name)
      .orderBy("version", "desc")
      .limit(1)
      .executeTakeFirst();
    if (latest && latest.content_hash === row.content_hash)
      return { row: latest as Selectable<Tables[T]>, published: false };
    const inserted = await trx
      .insertInto(table)
      .values({ ...row, version: (latest?.version ?? 0) + 1, published_at: engine.time(new Date()) })
      .returningAll()
      .executeTakeFirstOrThrow();
    return { row: inserted as Selectable<Tables[T]>, published: true };
  });
}

// Read as each job starts (its agent's version, and whether its name is a graph's): compiled once per engine
// (compiled-once.ts). One query shape for both tables, as in publishVersion.
function versionQuery(table: VersionTable) {
  return compiledOnce((db, v: { name: string; version?: number }) =>
    db
      .selectFrom(table as "graph_versions")
      .selectAll()
      .where("name", "=", v.name)
      .$if(v.version !== undefined, (q) => q.where("version", "=", v.version!))
      .orderBy("version", "desc")
      .limit(1),
  );
}

export const VERSION_QUERIES = {
  agent_versions: versionQuery("agent_versions"),
  graph_versions: versionQuery("graph_versions"),
} as const satisfies Record<VersionTable, unknown>;

/** The version asked for, or the latest; undefined when there is none. */
export async function getVersionRow<T extends VersionTable>(
  db: Db,
  engine: SqlEngine,
  tableName: T,
  name: string,
  version?: number,
): Promise<Selectable<Tables[T]> | undefined> {
  const { rows } = await VERSION_QUERIES[tableName].execute(db, engine, { name, ...(version ? { version } : {}) });
  return rows[0] as Selectable<Tables[T]> | undefined;
}

/** Every name at its latest version, by name. */
export async function latestVersionRows<T extends VersionTable>(
  db: Db,
  tableName: T,
): Promise<Selectable<Tables[T]>[]> {
  const table = tableName as "graph_versions";
  const rows = await db
    .selectFrom(`${table} as v`)
    .innerJoin(
      (eb) =>
        eb
          .selectFrom(table)
          .select(["name", (e) => e.fn.max("version").as("latest")])
          .groupBy("name")
          .as("m"),
      (join) => join.onRef("v.name", "=", "m.name").onRef("v.version", "=", "m.latest"),
    )
    .selectAll("v")
    .orderBy("v.name")
    .execute();
  return rows as Selectable<Tables[T]>[];
}
