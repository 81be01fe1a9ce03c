// The proxy's store on PostgreSQL, for several proxy replicas: secrets,
// session tokens, metering records and, unlike the SQLite store, the budget
// ledger itself. With one proxy, BudgetLedger holds accounts in memory; with
// several, each would hold its own view and together they could overspend.
// Here an account is a row, and a reservation locks it (SELECT ... FOR UPDATE,
// in one round trip through the reserve_budget function) so concurrent
// reservations from any replica are serialised per session. Amounts are
// `numeric`, so holds and settlements add up exactly. Each session's count of
// model calls is a row too, locked for the check and the count
// (count_model_call), so replicas together never pass a session's limit.
//
// Calls in flight, metering rows and budget settlements are group-committed
// (postgres-group-commit.ts): one statement (one round trip, one commit) per
// turn of the event loop for all of them, so a call's record and its charge
// commit at once. Each write's promise resolves when its statement commits,
// so a call in flight is durable before its attempt goes out, and a record is
// visible to every replica.
// Secret and token changes are NOTIFYed in the statement that makes them, so
// other replicas drop what they cached (postgres-change-feed.ts).
import { randomUUID } from "node:crypto";
import { channelName, checkSchemaName, createSchemaPool } from "@oz0/postgres";
import { sql } from "kysely";
import type pg from "pg";
import { budgetExhausted, callOverBudget } from "./budget-ledger.js";
import { modelCallsExhausted } from "./model-call-ledger.js";
import { PostgresChangeFeed } from "./postgres-change-feed.js";
import { PostgresGroupCommit } from "./postgres-group-commit.js";
import { ProxyError } from "./proxy-error.js";
import type {
  AttemptRecord,
  BudgetSnapshot,
  CallRecord,
  CountedCall,
  PendingAttempt,
  ProxyStore,
  Reservation,
  ReserveInput,
  SecretInfo,
  StoreChange,
  StoredSecret,
  TokenRecord,
  UsageTotals,
} from "./proxy-store.js";
import { interruptedRecords, tokenUse, type TokenUseAnswer } from "./proxy-store.js";
import { migratePostgres } from "./store-migrations.js";
import {
  ATTEMPT_COLUMNS,
  CALL_COLUMNS,
  deleteSecret,
  insertMetering,
  meteringRow,
  proxyQueries,
  revokeMatching,
  REVOKE_PARAMETERS,
  upsertSecret,
  UPSERT_SECRET_PARAMETERS,
} from "./store-queries.js";
import {
  attemptFromRow,
  callFromRow,
  meteringValues,
  pendingFromRow,
  pendingValues,
  POSTGRES_ENCODING,
  secretFromRow,
  tokenFromRow,
  usageFromRows,
  type MeteringRow,
  type PendingRow,
  type SecretRow,
  type TokenRow,
  type UsageRow,
} from "./store-rows.js";
import { COMPILERS, compiled, param } from "./store-sql.js";

/** The most interrupted calls one INSERT writes while reconciling (each row about 17 parameters). */
const RECONCILED_ROWS_PER_INSERT = 1_000;

const QUERIES = proxyQueries("postgres");
const db = COMPILERS.postgres;
// The changes other replicas cache are NOTIFYed in the statement that makes them, so they hear of each when it commits.
const NOTIFY = sql`pg_notify(${param("channel")}, ${param("notice")})::text`.as("notified");
/** (name, iv, ciphertext, tag, now, now, channel, notice): whether it replaced one (xmax is 0 on a row just inserted). */
const PUT_SECRET = compiled(
  db
    .with("saved", () => upsertSecret(db).returning(sql<boolean>`(xmax <> 0)`.as("replaced")))
    .selectFrom("saved")
    .select(["replaced", NOTIFY]),
  [...UPSERT_SECRET_PARAMETERS, "channel", "notice"],
);
/** (name, channel, notice) */
const DELETE_SECRET = compiled(
  db
    .with("gone", () => deleteSecret(db).returning("name"))
    .selectFrom("gone")
    .select(NOTIFY),
  ["name", "channel", "notice"],
);
/**
 * (now, hash, session, channel): one statement, so two replicas revoking at
 * once each report only the tokens they ended, and every replica hears of each.
 */
const REVOKE_TOKENS = compiled(
  db
    .with("revoked", () => revokeMatching(db))
    .selectFrom("revoked")
    .selectAll()
    .select(
      sql`pg_notify(${param("channel")}, json_build_object('kind', 'token_revoked', 'hash', revoked.hash)::text)::text`.as(
        "notified",
      ),
    ),
  [...REVOKE_PARAMETERS, "channel"],
);

export type { BudgetSnapshot } from "./proxy-store.js";

/** A hold on part of a session's budget, stored so every replica counts it. Settle it once. */
export interface StoredReservation extends Reservation {
  readonly id: string;
}

export interface PostgresProxyStoreOptions {
  /** A `postgres://` URL (DATABASE_URL). */
  connectionString: string;
  /**
   * Schema of the proxy's tables, created when missing (OZ0_DATABASE_SCHEMA).
   * Default `oz0_llm_proxy`. Secrets live here: in production give the proxy
   * a database role of its own that only it can use, so no other service can
   * read them.
   */
  schema?: string;
  /** Pool size. Default 10 (plus one connection that listens for other replicas' changes). */
  maxConnections?: number;
  /**
   * How long a reservation holds budget unless renewed. The replica making
   * the call renews its holds every sixth of this while the call runs, so a
   * call may take any time and renewals may fail for most of this (a
   * database failover) without a hold lapsing; a replica that died stops
   * renewing, and the sweep frees its holds once this has passed. Default 2
   * minutes.
   */
  reservationHoldMs?: number;
  /** How often this replica frees expired holds (`releaseExpiredReservations`). Default 15 s; 0: never. */
  sweepIntervalMs?: number;
  /** A background failure: the sweep, the listening connection. Never carries a secret. */
  onError?: (error: unknown) => void;
}

// Dollars go to `numeric` as decimal text, so 0.1 + 0.2 is 0.3 in the ledger.
function usd(value: number): string {
  if (!Number.isFinite(value) || value < 0)
    throw new ProxyError("invalid_argument", `a dollar amount must be a finite number ≥ 0, not ${value}`);
  return String(value);
}

export class PostgresProxyStore implements ProxyStore {
  /** Several replicas share it: budgets are rows, caches follow `watch`. */
  readonly shared = true;
  /** The schema holding the tables. */
  readonly schema: string;
  readonly #pool: pg.Pool;
  readonly #holdMs: number;
  readonly #feed: PostgresChangeFeed;
  readonly #channel: string;
  #sweepTimer: NodeJS.Timeout | undefined;
  /** Reservations of calls in flight here, renewed until settled (renewHolds). */
  readonly #held = new Set<string>();
  /** Calls in flight here (their pending rows), renewed with the holds until their record is written. */
  readonly #inFlight = new Set<string>();
  #renewTimer: NodeJS.Timeout | undefined;
  readonly #writes: PostgresGroupCommit;

  private constructor(options: {
    pool: pg.Pool;
    schema: string;
    holdMs: number;
    feed: PostgresChangeFeed;
    channel: string;
  }) {
    this.#pool = options.pool;
    this.schema = options.schema;
    this.#holdMs = options.holdMs;
    this.#feed = options.feed;
    this.#channel = options.channel;
    this.#writes = new PostgresGroupCommit({ pool: options.pool, holdMs: options.holdMs });
  }

  /** Connects, migrates under an advisory lock (so replicas starting together apply each version once) and starts listening. */
  static async open(options: PostgresProxyStoreOptions): Promise<PostgresProxyStore> {
    const schema = options.schema ?? "oz0_llm_proxy";
    try {
      checkSchemaName(schema);
    } catch (error) {
      throw new ProxyError("invalid_argument", (error as Error).message);
    }
    // A database that does not answer fails calls instead of hanging them.
    const pool = createSchemaPool({
      connectionString: options.connectionString,
      schema,
      maxConnections: options.maxConnections ?? 10,
      connectionTimeoutMs: 10_000,
    });
    const onError = options.onError ?? (() => undefined);
    const channel = channelName(schema, "llm_proxy");
    const feed = new PostgresChangeFeed({ connectionString: options.connectionString, channel, onError });
    const store = new PostgresProxyStore({ pool, schema, holdMs: options.reservationHoldMs ?? 120_000, feed, channel });
    try {
      await migratePostgres(pool, schema);
      await feed.start();
    } catch (error) {
      await feed.close();
      await pool.end();
      throw error;
    }
    const sweepMs = options.sweepIntervalMs ?? 15_000;
    if (sweepMs > 0) {
      store.#sweepTimer = setInterval(() => {
        store.releaseExpiredReservations().catch(onError);
      }, sweepMs);
      store.#sweepTimer.unref();
    }
    if (store.#holdMs > 0) {
      let renewing = false;
      store.#renewTimer = setInterval(() => {
        // One round at a time: a slow database must not pile renewals up.
        if (renewing) return;
        renewing = true;
        store
          .renewHolds()
          .catch(onError)
          .finally(() => (renewing = false));
      }, store.#holdMs / 6);
      store.#renewTimer.unref();
    }
    return store;
  }

  watch(listener: (change: StoreChange) => void): () => void {
    return this.#feed.watch(listener);
  }

  async putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }> {
    const { rows } = await this.#pool.query<{ replaced: boolean }>(PUT_SECRET, [
      secret.name,
      secret.iv,
      secret.ciphertext,
      secret.tag,
      now,
      now,
      this.#channel,
      notice({ kind: "secret", name: secret.name }),
    ]);
    return { replaced: rows[0]!.replaced };
  }

  async getSecret(name: string): Promise<StoredSecret | undefined> {
    const { rows } = await this.#pool.query<SecretRow>(QUERIES.getSecret, [name]);
    return rows[0] ? secretFromRow(rows[0]) : undefined;
  }

  async deleteSecret(name: string): Promise<boolean> {
    const result = await this.#pool.query(DELETE_SECRET, [name, this.#channel, notice({ kind: "secret", name })]);
    return (result.rowCount ?? 0) > 0;
  }

  async listSecrets(): Promise<SecretInfo[]> {
    const { rows } = await this.#pool.query<{ name: string; created_at: Date; updated_at: Date }>(QUERIES.listSecrets);
    return rows.map((r) => ({ name: r.name, createdAt: r.created_at, updatedAt: r.updated_at }));
  }

  async putToken(token: TokenRecord): Promise<void> {
    await this.#pool.query(QUERIES.putToken, [
      token.hash,
      token.job,
      token.agent,
      token.session,
      token.budgetUsd,
      token.createdAt,
      token.budgetSession ?? null,
      token.traceparent ?? null,
      token.maxModelCalls || null,
    ]);
  }

  async findToken(hash: string): Promise<TokenRecord | undefined> {
    const { rows } = await this.#pool.query<TokenRow>(QUERIES.findToken, [hash]);
    return rows[0] ? tokenFromRow(rows[0]) : undefined;
  }

  async useToken(hash: string, now: Date): Promise<TokenRecord | undefined> {
    const { rows } = await this.#pool.query<TokenRow>(QUERIES.useToken, [now, hash]);
    return rows[0] ? tokenFromRow(rows[0]) : undefined;
  }

  async revokeTokens(
    by: { hash?: string; session?: string },
    now: Date,
  ): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    const hash = by.hash ?? null;
    const session = by.session ?? null;
    const { rows } = await this.#pool.query<TokenRow>(REVOKE_TOKENS, [now, hash, session, this.#channel]);
    // Read after that commit: every matching token is revoked by now, so none can be marked used any more.
    const counts = await this.#pool.query<{ matched: number; used: number }>(QUERIES.tokenUse, [hash, session]);
    return { ended: rows.map(tokenFromRow), use: tokenUse(counts.rows[0]!) };
  }

  recordAttempt(attempt: AttemptRecord): Promise<void> {
    return this.#writes.attempt([...meteringValues(attempt, POSTGRES_ENCODING), attempt.attempt]);
  }

  recordCall(call: CallRecord): Promise<void> {
    this.#inFlight.delete(call.operationId);
    return this.#writes.call([...meteringValues(call, POSTGRES_ENCODING), call.attempts]);
  }

  beginAttempt(pending: PendingAttempt): Promise<void> {
    this.#inFlight.add(pending.operationId);
    // Committed before the attempt goes out, with whatever else this turn wrote (one round trip for all).
    return this.#writes.begin(pendingValues(pending, POSTGRES_ENCODING));
  }

  /**
   * Calls whose replica stopped renewing them (it died) become interrupted
   * calls, and their holds are freed as the sweep frees expired holds (a late
   * settle by a replica that was only cut off still charges its spend, and
   * its late record replaces the interrupted one). Any replica may run it;
   * each call is reconciled once.
   */
  async reconcileInterrupted(): Promise<CallRecord[]> {
    await this.#writes.drain();
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      // Row locks: a replica reconciling at the same time waits, then finds the rows gone.
      const { rows } = await client.query<PendingRow>(
        "DELETE FROM pending_calls WHERE expires_at <= now() RETURNING *",
      );
      const made: CallRecord[] = [];
      if (rows.length > 0) {
        const records = rows.map((row) => interruptedRecords(pendingFromRow(row)));
        // In parts: a replica that died with thousands of calls in flight left more rows than one statement's
        // 65,535 parameters hold (about 17 a row), and the reconcile failed at every start.
        for (let i = 0; i < records.length; i += RECONCILED_ROWS_PER_INSERT) {
          const part = records.slice(i, i + RECONCILED_ROWS_PER_INSERT);
          // Compiled here, not once: the rows are as many as the calls found, and this runs at start-up and rarely after.
          const attempts = insertMetering(
            db,
            "attempts",
            part.map((r) =>
              meteringRow(ATTEMPT_COLUMNS, [...meteringValues(r.attempt, POSTGRES_ENCODING), r.attempt.attempt]),
            ),
          )
            .onConflict((oc) => oc.doNothing())
            .compile();
          await client.query(attempts.sql, [...attempts.parameters]);
          const calls = insertMetering(
            db,
            "calls",
            part.map((r) => meteringRow(CALL_COLUMNS, [...meteringValues(r.call, POSTGRES_ENCODING), r.call.attempts])),
          )
            .onConflict((oc) => oc.doNothing())
            .returning("operation_id")
            .compile();
          const inserted = await client.query<{ operation_id: string }>(calls.sql, [...calls.parameters]);
          const fresh = new Set(inserted.rows.map((r) => r.operation_id));
          made.push(...part.filter((r) => fresh.has(r.call.operationId)).map((r) => r.call));
        }
        const holds = rows.map((r) => r.reservation_id).filter((id): id is string => id !== null);
        if (holds.length > 0) {
          await client.query(
            `WITH expired AS (
               UPDATE budget_reservations SET state = 'expired' WHERE id = ANY($1::text[]) AND state = 'held' RETURNING session, amount_usd),
             per_session AS (SELECT session, SUM(amount_usd) AS amount FROM expired GROUP BY session)
             UPDATE budget_accounts a SET reserved_usd = a.reserved_usd - p.amount FROM per_session p WHERE a.session = p.session`,
            [holds],
          );
        }
      }
      await client.query("COMMIT");
      return made;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  async listAttempts(job: string): Promise<AttemptRecord[]> {
    await this.#writes.drain();
    const { rows } = await this.#pool.query<MeteringRow & { attempt: number }>(QUERIES.listAttempts, [job]);
    return rows.map(attemptFromRow);
  }

  async listCalls(job: string): Promise<CallRecord[]> {
    await this.#writes.drain();
    const { rows } = await this.#pool.query<MeteringRow & { attempts: number }>(QUERIES.listCalls, [job]);
    return rows.map(callFromRow);
  }

  async usageByAgent(job: string): Promise<Map<string, UsageTotals>> {
    await this.#writes.drain();
    const { rows } = await this.#pool.query<UsageRow>(QUERIES.usageByAgent, [job]);
    return usageFromRows(rows);
  }

  async usageByAgentBetween(since: Date, until: Date): Promise<Map<string, UsageTotals>> {
    await this.#writes.drain();
    const { rows } = await this.#pool.query<UsageRow>(QUERIES.usageByAgentBetween, [since, until]);
    return usageFromRows(rows);
  }

  async chargedToSession(session: string): Promise<number> {
    await this.#writes.drain();
    const { rows } = await this.#pool.query<{ cost: number }>(QUERIES.chargedToSession, [session, session]);
    return rows[0]!.cost;
  }

  /**
   * Holds budget for one call, or throws `budget_exhausted`; the same rules as
   * BudgetLedger.reserve, but the account is a row locked for the decision,
   * so proxies on any number of replicas never hold more than the limit. An
   * account first seen starts from what the session's calls were charged.
   */
  async reserveBudget(input: ReserveInput): Promise<StoredReservation> {
    const id = randomUUID();
    const { rows } = await this.#pool.query<{
      o_amount: string | null;
      o_limit: string;
      o_spent: string;
      o_reserved: string;
    }>(
      "SELECT o_amount, o_limit, o_spent, o_reserved FROM reserve_budget($1, $2, $3::numeric, $4::numeric, $5::numeric, $6, $7)",
      [
        id,
        input.session,
        usd(input.limitUsd),
        usd(input.worstCaseUsd),
        usd(input.minimumUsd),
        input.partial,
        this.#holdMs,
      ],
    );
    const row = rows[0]!;
    if (row.o_amount === null) {
      const limitUsd = Number(row.o_limit);
      const available = limitUsd - Number(row.o_spent) - Number(row.o_reserved);
      if (available <= 0 || available < input.minimumUsd)
        throw budgetExhausted({ limitUsd, spentUsd: Number(row.o_spent), heldUsd: Number(row.o_reserved) });
      throw callOverBudget({ worstCaseUsd: input.worstCaseUsd, availableUsd: available, limitUsd });
    }
    this.#held.add(id);
    let settled: Promise<void> | undefined;
    return {
      id,
      session: input.session,
      amountUsd: Number(row.o_amount),
      settle: (actualUsd) => (settled ??= this.settle(id, actualUsd, input.session)),
    };
  }

  /**
   * Ends a hold, charging what the call cost, in the next batch (with the
   * call's record when both are queued in the same turn). A second settle of
   * the same reservation does nothing.
   */
  settle(reservationId: string, actualUsd: number, session = ""): Promise<void> {
    this.#held.delete(reservationId);
    let amount: string;
    try {
      amount = usd(actualUsd);
    } catch (error) {
      return Promise.reject(error as Error);
    }
    return this.#writes.settle(session, reservationId, amount);
  }

  /** Extends the holds of this replica's calls in flight by the hold time; returns how many it extended. */
  async renewHolds(): Promise<number> {
    if (this.#held.size === 0 && this.#inFlight.size === 0) return 0;
    // The calls in flight too, in the same statement: a call and its hold lapse together.
    const result = await this.#pool.query(
      `WITH calls_in_flight AS (UPDATE pending_calls SET expires_at = now() + $2 * interval '1 millisecond' WHERE operation_id = ANY($3::text[]))
       UPDATE budget_reservations SET expires_at = now() + $2 * interval '1 millisecond' WHERE id = ANY($1::text[]) AND state = 'held'`,
      [[...this.#held], this.#holdMs, [...this.#inFlight]],
    );
    return result.rowCount ?? 0;
  }

  /** Frees the holds of calls that never settled (their proxy died); returns how many. Any replica may run it. */
  async releaseExpiredReservations(): Promise<number> {
    const { rows } = await this.#pool.query<{ released: string }>(
      `WITH expired AS (
         UPDATE budget_reservations SET state = 'expired' WHERE state = 'held' AND expires_at <= now() RETURNING session, amount_usd),
       per_session AS (SELECT session, SUM(amount_usd) AS amount, COUNT(*) AS n FROM expired GROUP BY session),
       freed AS (
         UPDATE budget_accounts a SET reserved_usd = a.reserved_usd - p.amount FROM per_session p WHERE a.session = p.session RETURNING p.n)
       SELECT COALESCE(SUM(n), 0) AS released FROM freed`,
    );
    return Number(rows[0]!.released);
  }

  /**
   * Drops a session's account once its tokens are revoked, so the table does
   * not grow without end. Only an account with no call in flight is dropped:
   * a hold settled after its account was dropped would be charged to nothing,
   * or twice to a new account started from the calls table. Returns whether
   * it was dropped; try again after the calls end.
   */
  async forgetBudget(session: string): Promise<boolean> {
    const result = await this.#pool.query(
      "DELETE FROM budget_accounts a WHERE a.session = $1 AND NOT EXISTS (SELECT 1 FROM budget_reservations r WHERE r.session = a.session AND r.state = 'held')",
      [session],
    );
    await this.#pool.query(
      "DELETE FROM budget_reservations WHERE session = $1 AND state <> 'held' AND NOT EXISTS (SELECT 1 FROM budget_accounts WHERE session = $1)",
      [session],
    );
    return (result.rowCount ?? 0) > 0;
  }

  /**
   * Counts one model call of a session, or throws `model_calls_exhausted`:
   * the session's row is locked from the check to the count, so replicas
   * counting at once never pass the limit together. A count first seen
   * starts from the session's calls on record and in flight.
   */
  async countModelCall(input: { session: string; limit: number }): Promise<CountedCall> {
    const { rows } = await this.#pool.query<{ o_counted: boolean; o_made: number }>(
      "SELECT o_counted, o_made FROM count_model_call($1, $2)",
      [input.session, input.limit],
    );
    const row = rows[0]!;
    if (!row.o_counted) throw modelCallsExhausted({ limit: input.limit, made: row.o_made });
    // The count is in the row already: nothing to do when the call ends.
    return { end: () => undefined };
  }

  /** Drops a session's count; a later count starts from its calls on record and those in flight at any replica. */
  async forgetModelCalls(session: string): Promise<void> {
    await this.#pool.query("DELETE FROM model_call_counts WHERE session = $1", [session]);
  }

  /** Spent and held dollars of a session's account, across every replica. */
  async budgetSnapshot(session: string): Promise<BudgetSnapshot | undefined> {
    const { rows } = await this.#pool.query<{ limit_usd: string; spent_usd: string; reserved_usd: string }>(
      "SELECT limit_usd, spent_usd, reserved_usd FROM budget_accounts WHERE session = $1",
      [session],
    );
    const row = rows[0];
    return row
      ? { limitUsd: Number(row.limit_usd), spentUsd: Number(row.spent_usd), reservedUsd: Number(row.reserved_usd) }
      : undefined;
  }

  /** Writes the metering rows still queued, stops listening and sweeping, and closes the pool. */
  async close(): Promise<void> {
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    this.#sweepTimer = undefined;
    if (this.#renewTimer) clearInterval(this.#renewTimer);
    this.#renewTimer = undefined;
    await this.#writes.drain();
    await this.#feed.close();
    await this.#pool.end();
  }
}

function notice(change: StoreChange): string {
  return JSON.stringify(change);
}
