// The JobStore on SQLite: the embedded default, one file under the data
// directory (<home>/orchestrator.db), with the shared queries of
// sql-job-store.ts. Opening it applies the `jobs` part of the numbered
// migrations (migrations.ts), adopting a file from before them.
import { migrateSqlite } from "./migrations.js";
import { openSqlite, SQLITE, type SqliteFile } from "./sql-database.js";
import { SqlJobStore } from "./sql-job-store.js";

export class SqliteJobStore extends SqlJobStore {
  readonly #file: SqliteFile;

  constructor(options: { file: string }) {
    const file = openSqlite({
      file: options.file,
      synchronous: "NORMAL",
      checkpoints: "counted",
      migrate: (h) => migrateSqlite(h, "jobs"),
    });
    super(file.db, SQLITE);
    this.#file = file;
  }

  override async close(): Promise<void> {
    await this.#file.release();
  }
}
