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
import type Database from "better-sqlite3";
import type { SqliteDatabase, SqliteStatement } from "kysely";

const MAX_STATEMENTS = 500;

export function cachedStatements(handle: Database.Database): SqliteDatabase {
  const statements = new Map<string, SqliteStatement>();
  return {
    close: () => handle.close(),
    prepare(text: string): SqliteStatement {
      const sql = text === "begin" ? "begin immediate" : text;
      let statement = statements.get(sql);
      if (!statement) {
        statement = handle.prepare(sql) as unknown as SqliteStatement;
        if (statements.size >= MAX_STATEMENTS) statements.delete(statements.keys().next().value!);
        statements.set(sql, statement);
      }
      return statement;
    },
  };
}
