// A better-sqlite3 handle whose prepare() is cached by SQL text, for
// Kysely's SqliteDialect. The dialect calls prepare(sql) on every query;
// compiling a statement is most of what a small query costs (issue 24
// measured better-sqlite3's per-call prepare at about 3.7 ms of CPU per job
// in the orchestrator), and a prepared statement may be run again with other
// parameters. The SQL Kysely compiles for one query shape is the same text
// each time, so a job's queries are compiled once per process. The cache is
// bounded (queries with IN lists or multi-row VALUES make a text per length):
// the oldest entry goes first.
//
// Kysely begins a transaction with a plain BEGIN (deferred): its first write
// would then have to upgrade a read lock, and fail at once with SQLITE_BUSY
// if another process wrote meanwhile. Every transaction the stores open
// writes, so BEGIN here is BEGIN IMMEDIATE: the write lock is taken first,
// waiting (busy_timeout) for another process's transaction to end.
//
// `committed`, when given, is called after each commit that changed a row
// (a write outside a transaction, or the COMMIT of one that wrote): the
// file's checkpoint thread sleeps until one comes (sql-database.ts). A
// statement that changed nothing (an idle poll's claim of no rows) is none:
// it wrote nothing to the log.
import type Database from "better-sqlite3";
import type { SqliteDatabase, SqliteStatement } from "kysely";

const MAX_STATEMENTS = 500;

export function cachedStatements(handle: Database.Database, committed?: () => void): SqliteDatabase {
  const statements = new Map<string, SqliteStatement>();
  const changes = committed ? new CommitsWithChanges(handle, committed) : undefined;
  return {
    close: () => handle.close(),
    prepare(text: string): SqliteStatement {
      const sql = text === "begin" ? "begin immediate" : text;
      let statement = statements.get(sql);
      if (!statement) {
        const prepared = handle.prepare(sql);
        statement = changes ? changes.counting(prepared, sql) : (prepared as unknown as SqliteStatement);
        if (statements.size >= MAX_STATEMENTS) statements.delete(statements.keys().next().value!);
        statements.set(sql, statement);
      }
      return statement;
    },
  };
}

/** Calls `committed` once a commit that changed rows ended: a write on its own, or a transaction that wrote. */
class CommitsWithChanges {
  readonly #handle: Database.Database;
  readonly #committed: () => void;
  /** A statement changed rows since the last commit. */
  #changed = false;

  constructor(handle: Database.Database, committed: () => void) {
    this.#handle = handle;
    this.#committed = committed;
  }

  counting(statement: Database.Statement, sql: string): SqliteStatement {
    // Reads change nothing; BEGIN, COMMIT and ROLLBACK are read-only to SQLite too, and end what the writes began.
    if (statement.readonly && sql !== "commit" && sql !== "rollback") return statement as unknown as SqliteStatement;
    const writes = !statement.readonly;
    return {
      reader: statement.reader,
      all: (parameters) => {
        const rows = statement.all(parameters);
        // A write that returns rows (RETURNING) returns one for each row it changed.
        this.#ended(sql, writes && rows.length > 0);
        return rows;
      },
      run: (parameters) => {
        const result = statement.run(parameters);
        this.#ended(sql, writes && result.changes > 0);
        return result;
      },
      iterate: (parameters) => {
        const rows = statement.iterate(parameters);
        // Rows read one at a time: counted as a change whether or not it returns any.
        this.#ended(sql, writes);
        return rows;
      },
    };
  }

  #ended(sql: string, changed: boolean): void {
    if (sql === "rollback") this.#changed = false;
    else if (changed) this.#changed = true;
    if (this.#changed && !this.#handle.inTransaction) {
      this.#changed = false;
      this.#committed();
    }
  }
}
