// The PostgreSQL store's writes on the hot path, group-committed: every write
// queued in one turn of the event loop (calls in flight before they go
// upstream, attempt and call records, budget settlements, from all calls at
// once) goes out as one statement, one round trip and one commit. Each write's
// promise resolves when its statement commits, so a call in flight is durable
// before its attempt is sent and a record is visible to every replica by then.
// Its SQL is written here, not with the shared queries' Kysely: a batch's
// statement has as many rows as the turn wrote, so Kysely would build and
// compile one per flush, and these writes are PostgreSQL's alone (a CTE per
// table in one round trip, claims that lapse, settle_budget).
import type pg from "pg";
import { METERING_COLUMN_LIST, METERING_COLUMNS, PENDING_COLUMNS } from "./store-rows.js";

/** Rows per statement: at most 21 parameters each, far below PostgreSQL's 65 535. */
const BATCH_ROWS = 1_000;

const UPDATE_CALL = [...METERING_COLUMNS.slice(1), "attempts"].map((c) => `${c} = EXCLUDED.${c}`).join(", ");

interface Batch {
  begins: unknown[][];
  attempts: unknown[][];
  calls: unknown[][];
  /** Reservations to settle: session (for the lock order), id, dollars charged. */
  settles: [string, string, string][];
  done: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** `(…), (…)` with each row's values appended to `params`; `extra` ends every row (an expression over params already there). */
function valuesClause(rows: unknown[][], params: unknown[], extra = ""): string {
  return rows
    .map((row) => {
      const start = params.length;
      params.push(...row);
      return `(${row.map((_, i) => `$${start + i + 1}`).join(", ")}${extra})`;
    })
    .join(", ");
}

export class PostgresGroupCommit {
  readonly #pool: pg.Pool;
  readonly #holdMs: number;
  #batch: Batch | undefined;
  readonly #flushing = new Set<Promise<void>>();

  /** `holdMs`: how long a call in flight stays owned by this replica unless renewed. */
  constructor(options: { pool: pg.Pool; holdMs: number }) {
    this.#pool = options.pool;
    this.#holdMs = options.holdMs;
  }

  /** A call in flight (PENDING_COLUMNS values): inserted, or, for a retry, its attempt updated. */
  begin(values: unknown[]): Promise<void> {
    const batch = this.#current();
    batch.begins.push(values);
    return batch.done;
  }

  /** An attempt record (METERING_COLUMNS values, then the attempt number). */
  attempt(values: unknown[]): Promise<void> {
    const batch = this.#current();
    batch.attempts.push(values);
    return batch.done;
  }

  /** A call record (METERING_COLUMNS values, then the attempts); it ends the call's pending row in the same statement. */
  call(values: unknown[]): Promise<void> {
    const batch = this.#current();
    batch.calls.push(values);
    return batch.done;
  }

  /** Ends a budget hold, charging `amount` (decimal text), after the records queued with it. */
  settle(session: string, reservationId: string, amount: string): Promise<void> {
    const batch = this.#current();
    batch.settles.push([session, reservationId, amount]);
    return batch.done;
  }

  /** Writes what is queued and waits for writes in flight: a replica reads its own records. */
  async drain(): Promise<void> {
    if (this.#batch) this.#flush(this.#batch);
    if (this.#flushing.size > 0) await Promise.allSettled([...this.#flushing]);
  }

  #current(): Batch {
    if (this.#batch) return this.#batch;
    const { promise: done, resolve, reject } = Promise.withResolvers<void>();
    const batch: Batch = { begins: [], attempts: [], calls: [], settles: [], done, resolve, reject };
    this.#batch = batch;
    setImmediate(() => this.#flush(batch));
    return batch;
  }

  #flush(batch: Batch): void {
    if (this.#batch !== batch) return;
    this.#batch = undefined;
    const writing = this.#write(batch).then(batch.resolve, batch.reject);
    this.#flushing.add(writing);
    void writing.finally(() => this.#flushing.delete(writing));
  }

  async #write(batch: Batch): Promise<void> {
    const { begins, attempts, calls } = batch;
    // Settled in one order (by session) by every replica, so two batches never wait on each other's accounts.
    const settles = [...batch.settles].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
    // Settlements go with the last rows: a call's record commits with its charge, or before it.
    while (begins.length > 0 || attempts.length > 0 || calls.length > 0 || settles.length > 0) {
      const someBegins = begins.splice(0, BATCH_ROWS);
      const someAttempts = attempts.splice(0, BATCH_ROWS - someBegins.length);
      const someCalls = calls.splice(0, BATCH_ROWS - someBegins.length - someAttempts.length);
      const params: unknown[] = [];
      const expires = someBegins.length ? `, now() + $${params.push(this.#holdMs)} * interval '1 millisecond'` : "";
      // ON CONFLICT: a statement run again (after a deadlock) or a duplicate id never fails the rows beside it.
      const parts = [
        someBegins.length
          ? `INSERT INTO pending_calls (${PENDING_COLUMNS.join(", ")}, expires_at) VALUES ${valuesClause(someBegins, params, expires)}
             ON CONFLICT (operation_id) DO UPDATE SET attempt = EXCLUDED.attempt, attempt_started_at = EXCLUDED.attempt_started_at, expires_at = EXCLUDED.expires_at`
          : "",
        someAttempts.length
          ? `INSERT INTO attempts (${METERING_COLUMN_LIST}, attempt) VALUES ${valuesClause(someAttempts, params)} ON CONFLICT DO NOTHING`
          : "",
        // The call's record ends its pending row in the same statement (one commit).
        someCalls.length
          ? `DELETE FROM pending_calls WHERE operation_id = ANY($${params.push(someCalls.map((c) => c[0]))}::text[])`
          : "",
        // A call reconciled as interrupted while its replica was only cut off: its real record replaces that one.
        someCalls.length
          ? `INSERT INTO calls (${METERING_COLUMN_LIST}, attempts) VALUES ${valuesClause(someCalls, params)} ON CONFLICT (operation_id) DO UPDATE SET ${UPDATE_CALL} WHERE calls.outcome = 'interrupted'`
          : "",
      ].filter(Boolean);
      if (begins.length === 0 && attempts.length === 0 && calls.length === 0 && settles.length > 0) {
        const some = settles.splice(0);
        params.push(
          some.map((x) => x[1]),
          some.map((x) => x[2]),
        );
        // unnest yields its rows in array order, and each settle_budget runs as its row is read.
        parts.push(
          `SELECT settle_budget(s.id, s.amount) FROM unnest($${params.length - 1}::text[], $${params.length}::numeric[]) AS s(id, amount)`,
        );
      }
      const main = parts.pop()!;
      const sql = parts.length ? `WITH ${parts.map((part, i) => `w${i} AS (${part})`).join(", ")} ${main}` : main;
      await this.#query(sql, params);
    }
  }

  /** One statement (its own transaction), run again when PostgreSQL broke a deadlock by aborting it (the sweep locks many rows). */
  async #query(sql: string, params: unknown[]): Promise<void> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        await this.#pool.query(sql, params);
        return;
      } catch (error) {
        if ((error as { code?: string }).code !== "40P01" || attempt >= 3) throw error;
      }
    }
  }
}
