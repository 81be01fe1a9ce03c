// The query layer under both proxy stores: the tables as Kysely types, and
// Kysely that only compiles (no connection) for each engine. The stores
// never build a query per call: each query is compiled to SQL once, when a
// store opens, and run as that text (better-sqlite3 prepares it once; pg
// sends it with its parameters), because building and compiling a Kysely
// query costs more than the proxy's whole store work for a call (issue 24).
// A query's parameters are named where it is built (`param`), and its
// compiled form checks they come in the order the store passes them.
import {
  DummyDriver,
  Kysely,
  PostgresAdapter,
  PostgresIntrospector,
  PostgresQueryCompiler,
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type Compilable,
} from "kysely";
import type { MeteringRow, PendingRow, SecretRow, TokenRow } from "./store-rows.js";

export type EngineName = "sqlite" | "postgres";

/** The tables both engines have, as the shared queries use them. */
export interface ProxyTables {
  secrets: SecretRow;
  session_tokens: TokenRow;
  attempts: MeteringRow & { attempt: number };
  calls: MeteringRow & { attempts: number };
  /** SQLite says which process owns a call in flight; PostgreSQL when its replica's claim lapses. */
  pending_calls: PendingRow & { owner: string; expires_at: Date };
}

export type ProxyDb = Kysely<ProxyTables>;

function compileOnly<T>(engine: EngineName): Kysely<T> {
  const postgres = engine === "postgres";
  return new Kysely<T>({
    dialect: {
      createAdapter: () => (postgres ? new PostgresAdapter() : new SqliteAdapter()),
      createDriver: () => new DummyDriver(),
      createIntrospector: (db) => (postgres ? new PostgresIntrospector(db) : new SqliteIntrospector(db)),
      createQueryCompiler: () => (postgres ? new PostgresQueryCompiler() : new SqliteQueryCompiler()),
    },
  });
}

/** Kysely that compiles for `engine` and runs nothing. */
export const COMPILERS: Readonly<Record<EngineName, ProxyDb>> = {
  sqlite: compileOnly("sqlite"),
  postgres: compileOnly("postgres"),
};

const PARAMETER = "\u0000oz0-parameter:";

/** A parameter named `name`, to be given when the compiled query runs. Typed to fit any column. */
export function param(name: string): never {
  return `${PARAMETER}${name}` as never;
}

/** A row of parameters named as its columns, for an INSERT's values. Typed to fit any table. */
export function namedValues(columns: readonly string[]): never {
  return Object.fromEntries(columns.map((column) => [column, param(column)])) as never;
}

/**
 * The SQL of `query`, once its parameters are checked to be `order`, the
 * order the store passes them (a compiled statement takes them by position).
 */
export function compiled(query: Compilable, order: readonly string[]): string {
  const { sql, parameters } = query.compile();
  const names = parameters.map((value) =>
    typeof value === "string" && value.startsWith(PARAMETER)
      ? value.slice(PARAMETER.length)
      : `a value (${String(value)})`,
  );
  if (names.join() !== order.join())
    throw new Error(`query parameters are [${names.join(", ")}], not [${order.join(", ")}]: ${sql}`);
  return sql;
}
