// The GraphStore of one orchestrator: <home>/graphs.db, the shared queries
// of sql-graph-store.ts on the `graphs` part of the numbered migrations,
// beside @oz0/graph's own checkpoint tables (SqliteCheckpointStore on the
// same handle). Checkpoints must survive a power cut: synchronous = FULL.
import path from "node:path";
import { SqliteCheckpointStore } from "@oz0/graph";
import { migrateSqlite } from "./migrations.js";
import { openSqlite, SQLITE, type SqliteFile } from "./sql-database.js";
import { SqlGraphStore } from "./sql-graph-store.js";

export class SqliteGraphStore extends SqlGraphStore {
  readonly checkpoints: SqliteCheckpointStore;
  readonly #file: SqliteFile;

  private constructor(file: SqliteFile) {
    super(file.db, SQLITE);
    this.#file = file;
    this.checkpoints = new SqliteCheckpointStore({ database: file.handle });
  }

  /** Opens <home>/graphs.db; `close()` closes it (once every store of this process on it closed). */
  static open(home: string): SqliteGraphStore {
    const file = path.join(home, "graphs.db");
    return new SqliteGraphStore(
      openSqlite({
        file,
        synchronous: "FULL",
        checkpoints: "polled",
        checkpointEveryMs: 5_000,
        migrate: (h) => migrateSqlite(h, "graphs"),
      }),
    );
  }

  async close(): Promise<void> {
    this.checkpoints.close();
    await this.#file.release();
  }
}
