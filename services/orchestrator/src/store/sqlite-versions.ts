// Publishing a definition (an agent's, a graph's) as the next version of its
// name, unless its content hash equals the latest one's: then the latest is
// the answer and nothing is written. One SQLite transaction, so two publishes
// of one name cannot both take the same number.
import type Database from "better-sqlite3";

/** The tables holding versions; each has name, version, content_hash and published_at columns. */
export type SqliteVersionTable = "agent_versions" | "orch_graph_versions";

export interface SqliteVersionRow {
  name: string;
  version: number;
  content_hash: string;
  published_at: number;
}

export function publishSqliteVersion<Row extends SqliteVersionRow>(
  db: Database.Database,
  options: { table: SqliteVersionTable; row: Omit<Row, "version" | "published_at"> },
): { row: Row; published: boolean } {
  const { table } = options;
  return db.transaction(() => {
    const latest = db
      .prepare(`SELECT * FROM ${table} WHERE name = ? ORDER BY version DESC LIMIT 1`)
      .get(options.row.name) as Row | undefined;
    if (latest && latest.content_hash === options.row.content_hash) return { row: latest, published: false };
    const row = { ...options.row, version: (latest?.version ?? 0) + 1, published_at: Date.now() } as Row;
    const columns = Object.keys(row);
    db.prepare(`INSERT INTO ${table} (${columns.join(", ")}) VALUES (${columns.map((c) => `@${c}`).join(", ")})`).run(
      row,
    );
    return { row, published: true };
  })();
}
