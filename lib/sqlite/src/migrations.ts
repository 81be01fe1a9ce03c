// Numbered migrations for a service's SQLite file, the counterpart of
// @oz0/postgres's runMigrations: each component's versions are recorded in
// the file's own `oz0_migrations` table (the same columns as PostgreSQL's),
// and a file made before numbered migrations (its schema made by CREATE
// TABLE IF NOT EXISTS and ALTERs at each open) is adopted: each migration's
// `present` probe says whether the file already has what it makes, and
// those are recorded as applied without running.
import type Database from "better-sqlite3";

/** What a SQLite file from before numbered migrations has, for adopting it. */
export interface SchemaProbe {
  hasTable(name: string): boolean;
  hasColumn(table: string, column: string): boolean;
}

export interface SqliteMigration {
  version: number;
  name: string;
  /** The statements, separated by semicolons. */
  sql: string;
  /** On a file from before numbered migrations: true when it already has what this makes (recorded, not run). */
  present?(probe: SchemaProbe): boolean;
}

export interface SqliteMigrationOptions {
  db: Database.Database;
  /** Whose migrations these are (`orchestrator`, `llm-proxy`): components sharing a file keep their own versions. */
  component: string;
  /** In version order. Append only: never edit one that has been applied somewhere. */
  migrations: readonly SqliteMigration[];
}

/**
 * Applies the migrations the file lacks, in one IMMEDIATE transaction (a
 * second process opening the file at once waits, then finds them
 * recorded), adopting a file from before numbered migrations first.
 * Returns the versions it ran.
 */
export function runSqliteMigrations(options: SqliteMigrationOptions): number[] {
  const { db, component, migrations } = options;
  return db
    .transaction((): number[] => {
      const probe: SchemaProbe = {
        hasTable: (name) =>
          db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined,
        hasColumn: (table, column) =>
          (db.prepare("SELECT name FROM pragma_table_info(?)").all(table) as { name: string }[]).some(
            (c) => c.name === column,
          ),
      };
      // A file with tables but no record of migrations was made before them.
      const adopting = !probe.hasTable("oz0_migrations") && migrations.some((m) => m.present?.(probe) === true);
      db.exec(`CREATE TABLE IF NOT EXISTS oz0_migrations (component TEXT NOT NULL, version INTEGER NOT NULL,
        name TEXT NOT NULL, applied_at INTEGER NOT NULL, PRIMARY KEY (component, version))`);
      const done = new Set(
        (
          db.prepare("SELECT version FROM oz0_migrations WHERE component = ?").all(component) as { version: number }[]
        ).map((r) => r.version),
      );
      const record = db.prepare(
        "INSERT INTO oz0_migrations (component, version, name, applied_at) VALUES (?, ?, ?, ?)",
      );
      const ran: number[] = [];
      for (const migration of migrations) {
        if (done.has(migration.version)) continue;
        if (!(adopting && migration.present?.(probe) === true)) {
          db.exec(migration.sql);
          ran.push(migration.version);
        }
        record.run(component, migration.version, migration.name, Date.now());
      }
      return ran;
    })
    .immediate();
}
