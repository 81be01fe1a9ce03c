// Queries of a job's hot path compiled once per engine and shape, then run
// with each call's values (issue 24). Kysely builds an operation-node tree
// and compiles it to SQL on every execute(): for the dozens of small queries
// a job makes (its appended events, its row read and updated, the lifecycle
// outbox) that was 10-15 ms of CPU per job, about a third of the
// orchestrator's profile, while the SQL text of one query shape never
// changes. Kysely has no cache of its own for this; its recipe for splitting
// building from execution (site/docs/recipes/0004) is `compile()` and then
// `executeQuery(compiledQuery)`, which this follows: the query is built
// from the same builder code with a placeholder in place of each value,
// compiled once, and each call runs that SQL with its own values in the
// order the compiler put the placeholders (`CompiledQuery.raw`), through
// the same Kysely instance, so SQLite's one-query-at-a-time mutex and an
// open transaction's connection are used exactly as before.
//
// What decides the SQL is the shape of the values, never the values
// themselves: which keys an object has (a patch's columns), how long an
// array is (rows inserted, an IN list), and where a value is null or
// undefined (kept as they are, since Kysely may write them into the SQL).
// Each shape is compiled the first time it is seen. A builder may branch on
// the engine and on whether a value is present (null and undefined are part
// of the shape), never on a value itself: it sees placeholders.
import { CompiledQuery, type Compilable, type QueryResult } from "kysely";
import type { Db, SqlEngine } from "./sql-database.js";

/** Stands for one value while the query is compiled: `path` leads to it in the call's values. */
class Placeholder {
  readonly path: readonly (string | number)[];
  constructor(path: readonly (string | number)[]) {
    this.path = path;
  }
}

/** A parameter of the compiled SQL: one of the call's values, or a constant the builder wrote itself. */
type Parameter = { path: readonly (string | number)[] } | { constant: unknown };

interface Compiled {
  sql: string;
  parameters: Parameter[];
}

const MAX_SHAPES = 200;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null) return false;
  const proto = Object.getPrototypeOf(value) as unknown;
  return proto === Object.prototype || proto === null;
}

/** The values with a placeholder for each leaf; arrays and plain objects are kept as structure. */
function placeholders(value: unknown, path: (string | number)[]): unknown {
  if (value === null || value === undefined) return value;
  if (Array.isArray(value)) return value.map((item, i) => placeholders(item, [...path, i]));
  if (isPlainObject(value)) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value)) out[key] = placeholders(value[key], [...path, key]);
    return out;
  }
  return new Placeholder(path);
}

/** What of the values decides the SQL: keys, lengths, and where null/undefined are. */
function shapeOf(value: unknown): string {
  if (value === null) return "n";
  if (value === undefined) return "u";
  if (Array.isArray(value)) {
    let shape = "[";
    for (const item of value) shape += shapeOf(item) + ",";
    return shape + "]";
  }
  if (isPlainObject(value)) {
    let shape = "{";
    for (const key of Object.keys(value)) shape += key + ":" + shapeOf(value[key]) + ",";
    return shape + "}";
  }
  return "v";
}

function valueAt(values: unknown, path: readonly (string | number)[]): unknown {
  let value = values;
  for (const key of path) value = (value as Record<string | number, unknown>)[key];
  return value;
}

/**
 * A query built by `build` once per engine and shape of its values, then
 * run with each call's values. `V` is what a call passes: the builder gets
 * an object of the same shape whose leaves are placeholders (typed as the
 * values, which is all Kysely needs to place them).
 */
export class CompiledOnce<V, R> {
  readonly #build: (db: Db, values: V, engine: SqlEngine) => Compilable<R>;
  readonly #compiled = new Map<string, Compiled>();

  constructor(build: (db: Db, values: V, engine: SqlEngine) => Compilable<R>) {
    this.#build = build;
  }

  /** The SQL and parameters this call runs (compiled on first sight of its shape). */
  compile(db: Db, engine: SqlEngine, values: V): CompiledQuery<R> {
    const key = engine.name + shapeOf(values);
    let compiled = this.#compiled.get(key);
    if (!compiled) {
      const query = this.#build(db, placeholders(values, []) as V, engine).compile();
      compiled = {
        sql: query.sql,
        parameters: query.parameters.map((p) => (p instanceof Placeholder ? { path: p.path } : { constant: p })),
      };
      if (this.#compiled.size >= MAX_SHAPES) this.#compiled.delete(this.#compiled.keys().next().value!);
      this.#compiled.set(key, compiled);
    }
    const parameters = compiled.parameters.map((p) => ("path" in p ? valueAt(values, p.path) : p.constant));
    return CompiledQuery.raw(compiled.sql, parameters) as CompiledQuery<R>;
  }

  /** What Kysely's builder compiles for this call, every time (for tests and benches to compare with). */
  built(db: Db, engine: SqlEngine, values: V): CompiledQuery<R> {
    return this.#build(db, values, engine).compile();
  }

  /** Runs on `db`, which may be a transaction. */
  execute(db: Db, engine: SqlEngine, values: V): Promise<QueryResult<R>> {
    return db.executeQuery(this.compile(db, engine, values));
  }
}

/** A query compiled once per engine and shape (see the top of this file). */
export function compiledOnce<V, R>(build: (db: Db, values: V, engine: SqlEngine) => Compilable<R>): CompiledOnce<V, R> {
  return new CompiledOnce(build);
}
