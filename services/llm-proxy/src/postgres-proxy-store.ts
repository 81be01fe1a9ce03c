// The proxy's store on PostgreSQL, for several proxy replicas: secrets,
// session tokens, metering records and, unlike the SQLite store, the budget
// ledger itself. With one proxy, BudgetLedger holds accounts in memory; with
// several, each would hold its own view and together they could overspend.
// Here an account is a row, and a reservation locks it (SELECT ... FOR UPDATE,
// in one round trip through the reserve_budget function) so concurrent
// reservations from any replica are serialised per session. Amounts are
// `numeric`, so holds and settlements add up exactly.
//
// Metering rows and budget settlements are written in batches: one statement
// (one round trip, one commit) per turn of the event loop, attempts, calls
// and settlements together, so a call's record and its charge commit at once.
// Each write's promise resolves when its batch is committed, so the record is
// visible to every replica by then.
// Secret and token changes are NOTIFYed in the statement that makes them, so
// other replicas drop what they cached (postgres-change-feed.ts).
import { randomUUID } from "node:crypto";
import { channelName, checkSchemaName, createSchemaPool, runMigrations, type Migration } from "@oz0/postgres";
import type pg from "pg";
import { PostgresChangeFeed } from "./postgres-change-feed.js";
import { ProxyError } from "./proxy-error.js";
import type {
  AttemptRecord,
  BudgetSnapshot,
  CallRecord,
  Outcome,
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

const METERING_COLUMNS = `operation_id text NOT NULL, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  provider text NOT NULL, model text NOT NULL, wire text NOT NULL, stream boolean NOT NULL, status integer NOT NULL,
  outcome text NOT NULL, input_tokens bigint NOT NULL, output_tokens bigint NOT NULL, cache_read_tokens bigint NOT NULL,
  cache_write_tokens bigint NOT NULL, reasoning_tokens bigint NOT NULL, cost_usd double precision NOT NULL,
  latency_ms double precision NOT NULL, ttft_ms double precision, estimated boolean NOT NULL, started_at timestamptz NOT NULL`;

/** Append only: never edit one that has been applied somewhere. */
const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "secrets, session tokens, metering, budgets",
    sql: `
CREATE TABLE secrets (name text PRIMARY KEY, iv bytea NOT NULL, ciphertext bytea NOT NULL, tag bytea NOT NULL,
  created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL);
CREATE TABLE session_tokens (hash text PRIMARY KEY, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  budget_usd double precision NOT NULL, created_at timestamptz NOT NULL, revoked_at timestamptz);
CREATE INDEX session_tokens_by_session ON session_tokens (session);
CREATE TABLE attempts (${METERING_COLUMNS}, attempt integer NOT NULL, PRIMARY KEY (operation_id, attempt));
CREATE INDEX attempts_by_job ON attempts (job);
CREATE TABLE calls (${METERING_COLUMNS}, attempts integer NOT NULL, PRIMARY KEY (operation_id));
CREATE INDEX calls_by_job ON calls (job);
CREATE INDEX calls_by_session ON calls (session);
CREATE TABLE budget_accounts (session text PRIMARY KEY, limit_usd numeric NOT NULL, spent_usd numeric NOT NULL,
  reserved_usd numeric NOT NULL);
-- state: held (counted in reserved_usd), settled, or expired (freed by the sweep; a late settle still counts its spend).
CREATE TABLE budget_reservations (id text PRIMARY KEY, session text NOT NULL, amount_usd numeric NOT NULL, state text NOT NULL,
  actual_usd numeric, created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL);
CREATE INDEX budget_reservations_held ON budget_reservations (expires_at) WHERE state = 'held';
`,
  },
  {
    version: 2,
    name: "budget reservations in one round trip",
    // Each function is one transaction's worth of locking: the account row is
    // locked from the decision to the hold. A settled reservation is deleted
    // (a second settle finds nothing); only holds in flight and expired ones stay.
    // search_path is fixed at creation, so the functions find this schema's tables.
    sql: `
CREATE INDEX budget_reservations_by_session ON budget_reservations (session);
CREATE FUNCTION reserve_budget(p_id text, p_session text, p_limit numeric, p_worst numeric, p_minimum numeric, p_partial boolean, p_hold_ms double precision)
RETURNS TABLE (o_amount numeric, o_limit numeric, o_spent numeric, o_reserved numeric)
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  a budget_accounts%ROWTYPE;
  available numeric;
  amount numeric;
BEGIN
  SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  IF NOT FOUND THEN
    -- A first reservation starts from what the session's calls were charged (a restart, a forgotten account).
    INSERT INTO budget_accounts (session, limit_usd, spent_usd, reserved_usd)
      SELECT p_session, p_limit, COALESCE(SUM(c.cost_usd), 0)::numeric, 0 FROM calls c WHERE c.session = p_session
      ON CONFLICT (session) DO NOTHING;
    SELECT * INTO a FROM budget_accounts WHERE session = p_session FOR UPDATE;
  END IF;
  available := a.limit_usd - a.spent_usd - a.reserved_usd;
  IF available <= 0 OR available < p_minimum OR (NOT p_partial AND p_worst > available) THEN
    RETURN QUERY SELECT NULL::numeric, a.limit_usd, a.spent_usd, a.reserved_usd;
    RETURN;
  END IF;
  amount := LEAST(p_worst, available);
  UPDATE budget_accounts SET reserved_usd = reserved_usd + amount WHERE session = p_session;
  INSERT INTO budget_reservations (id, session, amount_usd, state, created_at, expires_at)
    VALUES (p_id, p_session, amount, 'held', now(), now() + p_hold_ms * interval '1 millisecond');
  RETURN QUERY SELECT amount, a.limit_usd, a.spent_usd, a.reserved_usd + amount;
END
$fn$;
CREATE FUNCTION settle_budget(p_id text, p_actual numeric) RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
DECLARE
  r budget_reservations%ROWTYPE;
BEGIN
  DELETE FROM budget_reservations WHERE id = p_id RETURNING * INTO r;
  IF NOT FOUND OR r.state = 'settled' THEN RETURN; END IF;
  -- An expired hold was already given back by the sweep: only the spend is left to count.
  UPDATE budget_accounts
    SET reserved_usd = reserved_usd - CASE WHEN r.state = 'held' THEN r.amount_usd ELSE 0 END, spent_usd = spent_usd + p_actual
    WHERE session = r.session;
END
$fn$;
DELETE FROM budget_reservations WHERE state = 'settled';
`,
  },
  {
    version: 3,
    name: "a session token's first use",
    // Nothing recorded the use of the tokens already there: count them used, which claims nothing false.
    sql: "ALTER TABLE session_tokens ADD COLUMN used_at timestamptz; UPDATE session_tokens SET used_at = created_at;",
  },
  {
    version: 4,
    name: "calls in flight, reconciled as interrupted when their replica is gone",
    // One row per call in flight, written before its first attempt is sent and deleted with the
    // call's record. Its replica renews expires_at with its budget holds; once it lapses the
    // replica is gone, and any replica turns the row into an interrupted call.
    sql: `
CREATE TABLE pending_calls (operation_id text PRIMARY KEY, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  provider text NOT NULL, model text NOT NULL, wire text NOT NULL, stream boolean NOT NULL, attempt integer NOT NULL,
  started_at timestamptz NOT NULL, attempt_started_at timestamptz NOT NULL, reservation_id text, expires_at timestamptz NOT NULL);
CREATE INDEX pending_calls_by_expiry ON pending_calls (expires_at);
`,
  },
];

interface MeteringRow {
  operation_id: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: string;
  stream: boolean;
  status: number;
  outcome: string;
  input_tokens: string;
  output_tokens: string;
  cache_read_tokens: string;
  cache_write_tokens: string;
  reasoning_tokens: string;
  cost_usd: number;
  latency_ms: number;
  ttft_ms: number | null;
  estimated: boolean;
  started_at: Date;
}

interface TokenRow {
  hash: string;
  job: string;
  agent: string;
  session: string;
  budget_usd: number;
  created_at: Date;
  revoked_at: Date | null;
  used_at: Date | null;
}

const COLUMN_LIST =
  "operation_id, job, agent, session, provider, model, wire, stream, status, outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, latency_ms, ttft_ms, estimated, started_at";

function meteringValues(record: AttemptRecord | CallRecord): unknown[] {
  return [
    record.operationId,
    record.job,
    record.agent,
    record.session,
    record.provider,
    record.model,
    record.wire,
    record.stream,
    record.status,
    record.outcome,
    record.usage.input,
    record.usage.output,
    record.usage.cacheRead,
    record.usage.cacheWrite,
    record.usage.reasoning,
    record.costUsd,
    record.latencyMs,
    record.ttftMs ?? null,
    record.estimated,
    record.startedAt,
  ];
}

function meteringFromRow(row: MeteringRow): Omit<AttemptRecord, "attempt"> {
  return {
    operationId: row.operation_id,
    job: row.job,
    agent: row.agent,
    session: row.session,
    provider: row.provider,
    model: row.model,
    wire: row.wire,
    stream: row.stream,
    status: row.status,
    outcome: row.outcome as Outcome,
    // bigint columns arrive as strings; token counts stay far below 2^53.
    usage: {
      input: Number(row.input_tokens),
      output: Number(row.output_tokens),
      cacheRead: Number(row.cache_read_tokens),
      cacheWrite: Number(row.cache_write_tokens),
      reasoning: Number(row.reasoning_tokens),
    },
    costUsd: row.cost_usd,
    latencyMs: row.latency_ms,
    ...(row.ttft_ms === null ? {} : { ttftMs: row.ttft_ms }),
    estimated: row.estimated,
    startedAt: row.started_at,
  };
}

function tokenFromRow(row: TokenRow): TokenRecord {
  return {
    hash: row.hash,
    job: row.job,
    agent: row.agent,
    session: row.session,
    budgetUsd: row.budget_usd,
    createdAt: row.created_at,
    ...(row.revoked_at === null ? {} : { revokedAt: row.revoked_at }),
    ...(row.used_at === null ? {} : { usedAt: row.used_at }),
  };
}

// Dollars go to `numeric` as decimal text, so 0.1 + 0.2 is 0.3 in the ledger.
function usd(value: number): string {
  if (!Number.isFinite(value) || value < 0) throw new ProxyError("invalid_argument", `a dollar amount must be a finite number ≥ 0, not ${value}`);
  return String(value);
}


const UPDATE_CALL = [...COLUMN_LIST.split(", ").slice(1), "attempts"].map((c) => `${c} = EXCLUDED.${c}`).join(", ");

interface PendingRow {
  operation_id: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: string;
  stream: boolean;
  attempt: number;
  started_at: Date;
  attempt_started_at: Date;
  reservation_id: string | null;
}

function pendingFromRow(row: PendingRow): PendingAttempt {
  return {
    operationId: row.operation_id,
    job: row.job,
    agent: row.agent,
    session: row.session,
    provider: row.provider,
    model: row.model,
    wire: row.wire,
    stream: row.stream,
    attempt: row.attempt,
    startedAt: row.started_at,
    attemptStartedAt: row.attempt_started_at,
    ...(row.reservation_id === null ? {} : { reservationId: row.reservation_id }),
  };
}

/** Rows per metering statement: 21 parameters each, far below PostgreSQL's 65 535. */
const BATCH_ROWS = 1_000;

interface MeteringBatch {
  attempts: unknown[][];
  calls: unknown[][];
  /** Reservations to settle: session (for the lock order), id, dollars charged. */
  settles: [string, string, string][];
  done: Promise<void>;
  resolve: () => void;
  reject: (error: unknown) => void;
}

function valuesClause(rows: unknown[][], params: unknown[]): string {
  return rows
    .map((row) => {
      const start = params.length;
      params.push(...row);
      return `(${row.map((_, i) => `$${start + i + 1}`).join(", ")})`;
    })
    .join(", ");
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
  #batch: MeteringBatch | undefined;
  readonly #flushing = new Set<Promise<void>>();

  private constructor(options: { pool: pg.Pool; schema: string; holdMs: number; feed: PostgresChangeFeed; channel: string }) {
    this.#pool = options.pool;
    this.schema = options.schema;
    this.#holdMs = options.holdMs;
    this.#feed = options.feed;
    this.#channel = options.channel;
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
    const pool = createSchemaPool({ connectionString: options.connectionString, schema, maxConnections: options.maxConnections ?? 10, connectionTimeoutMs: 10_000 });
    const onError = options.onError ?? (() => undefined);
    const channel = channelName(schema, "llm_proxy");
    const feed = new PostgresChangeFeed({ connectionString: options.connectionString, channel, onError });
    const store = new PostgresProxyStore({ pool, schema, holdMs: options.reservationHoldMs ?? 120_000, feed, channel });
    try {
      await runMigrations({ pool, schema, component: "llm-proxy", migrations: MIGRATIONS });
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
    // xmax is 0 on a freshly inserted row and set on one the upsert updated.
    const { rows } = await this.#pool.query<{ replaced: boolean }>(
      `WITH saved AS (
         INSERT INTO secrets (name, iv, ciphertext, tag, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
         ON CONFLICT (name) DO UPDATE SET iv = excluded.iv, ciphertext = excluded.ciphertext, tag = excluded.tag, updated_at = excluded.updated_at
         RETURNING (xmax <> 0) AS replaced)
       SELECT replaced, pg_notify($6, $7)::text AS notified FROM saved`,
      [secret.name, secret.iv, secret.ciphertext, secret.tag, now, this.#channel, notice({ kind: "secret", name: secret.name })],
    );
    return { replaced: rows[0]!.replaced };
  }

  async getSecret(name: string): Promise<StoredSecret | undefined> {
    const { rows } = await this.#pool.query<{ name: string; iv: Buffer; ciphertext: Buffer; tag: Buffer; created_at: Date; updated_at: Date }>(
      "SELECT * FROM secrets WHERE name = $1",
      [name],
    );
    const row = rows[0];
    if (!row) return undefined;
    return { name: row.name, iv: row.iv, ciphertext: row.ciphertext, tag: row.tag, createdAt: row.created_at, updatedAt: row.updated_at };
  }

  async deleteSecret(name: string): Promise<boolean> {
    const result = await this.#pool.query(
      "WITH gone AS (DELETE FROM secrets WHERE name = $1 RETURNING name) SELECT pg_notify($2, $3)::text AS notified FROM gone",
      [name, this.#channel, notice({ kind: "secret", name })],
    );
    return (result.rowCount ?? 0) > 0;
  }

  async listSecrets(): Promise<SecretInfo[]> {
    const { rows } = await this.#pool.query<{ name: string; created_at: Date; updated_at: Date }>("SELECT name, created_at, updated_at FROM secrets ORDER BY name");
    return rows.map((r) => ({ name: r.name, createdAt: r.created_at, updatedAt: r.updated_at }));
  }

  async putToken(token: TokenRecord): Promise<void> {
    await this.#pool.query(
      "INSERT INTO session_tokens (hash, job, agent, session, budget_usd, created_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, NULL)",
      [token.hash, token.job, token.agent, token.session, token.budgetUsd, token.createdAt],
    );
  }

  async findToken(hash: string): Promise<TokenRecord | undefined> {
    const { rows } = await this.#pool.query<TokenRow>("SELECT * FROM session_tokens WHERE hash = $1", [hash]);
    return rows[0] ? tokenFromRow(rows[0]) : undefined;
  }

  async useToken(hash: string, now: Date): Promise<TokenRecord | undefined> {
    // The row lock orders this against a concurrent revocation: after one commits, the other sees it.
    const { rows } = await this.#pool.query<TokenRow>(
      "UPDATE session_tokens SET used_at = coalesce(used_at, $2) WHERE hash = $1 AND revoked_at IS NULL RETURNING *",
      [hash, now],
    );
    return rows[0] ? tokenFromRow(rows[0]) : undefined;
  }

  async revokeTokens(by: { hash?: string; session?: string }, now: Date): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    // One statement: two replicas revoking at once each report only the tokens they ended,
    // and every replica hears of each token when it commits.
    const { rows } = await this.#pool.query<TokenRow>(
      `WITH revoked AS (
         UPDATE session_tokens SET revoked_at = $3 WHERE revoked_at IS NULL AND (hash = $1 OR session = $2) RETURNING *)
       SELECT revoked.*, pg_notify($4, json_build_object('kind', 'token_revoked', 'hash', revoked.hash)::text)::text AS notified FROM revoked`,
      [by.hash ?? null, by.session ?? null, now, this.#channel],
    );
    // Read after that commit: every matching token is revoked by now, so none can be marked used any more.
    const counts = await this.#pool.query<{ matched: number; used: number }>(
      "SELECT count(*)::integer AS matched, count(used_at)::integer AS used FROM session_tokens WHERE hash = $1 OR session = $2",
      [by.hash ?? null, by.session ?? null],
    );
    return { ended: rows.map(tokenFromRow), use: tokenUse(counts.rows[0]!) };
  }

  recordAttempt(attempt: AttemptRecord): Promise<void> {
    const batch = this.#currentBatch();
    batch.attempts.push([...meteringValues(attempt), attempt.attempt]);
    return batch.done;
  }

  recordCall(call: CallRecord): Promise<void> {
    this.#inFlight.delete(call.operationId);
    const batch = this.#currentBatch();
    batch.calls.push([...meteringValues(call), call.attempts]);
    return batch.done;
  }

  async beginAttempt(pending: PendingAttempt): Promise<void> {
    this.#inFlight.add(pending.operationId);
    // Not batched: the row must be committed before the attempt goes out.
    await this.#pool.query(
      `INSERT INTO pending_calls (operation_id, job, agent, session, provider, model, wire, stream, attempt, started_at, attempt_started_at, reservation_id, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, now() + $13 * interval '1 millisecond')
       ON CONFLICT (operation_id) DO UPDATE SET attempt = EXCLUDED.attempt, attempt_started_at = EXCLUDED.attempt_started_at, expires_at = EXCLUDED.expires_at`,
      [
        pending.operationId,
        pending.job,
        pending.agent,
        pending.session,
        pending.provider,
        pending.model,
        pending.wire,
        pending.stream,
        pending.attempt,
        pending.startedAt,
        pending.attemptStartedAt,
        pending.reservationId ?? null,
        this.#holdMs,
      ],
    );
  }

  /**
   * Calls whose replica stopped renewing them (it died) become interrupted
   * calls, and their holds are freed as the sweep frees expired holds (a late
   * settle by a replica that was only cut off still charges its spend, and
   * its late record replaces the interrupted one). Any replica may run it;
   * each call is reconciled once.
   */
  async reconcileInterrupted(): Promise<CallRecord[]> {
    await this.#drain();
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      // Row locks: a replica reconciling at the same time waits, then finds the rows gone.
      const { rows } = await client.query<PendingRow>("DELETE FROM pending_calls WHERE expires_at <= now() RETURNING *");
      const made: CallRecord[] = [];
      if (rows.length > 0) {
        const records = rows.map((row) => interruptedRecords(pendingFromRow(row)));
        const params: unknown[] = [];
        await client.query(`INSERT INTO attempts (${COLUMN_LIST}, attempt) VALUES ${valuesClause(records.map((r) => [...meteringValues(r.attempt), r.attempt.attempt]), params)} ON CONFLICT DO NOTHING`, params);
        const callParams: unknown[] = [];
        const inserted = await client.query<{ operation_id: string }>(
          `INSERT INTO calls (${COLUMN_LIST}, attempts) VALUES ${valuesClause(records.map((r) => [...meteringValues(r.call), r.call.attempts]), callParams)} ON CONFLICT DO NOTHING RETURNING operation_id`,
          callParams,
        );
        const fresh = new Set(inserted.rows.map((r) => r.operation_id));
        made.push(...records.filter((r) => fresh.has(r.call.operationId)).map((r) => r.call));
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

  #currentBatch(): MeteringBatch {
    if (this.#batch) return this.#batch;
    let resolve!: () => void;
    let reject!: (error: unknown) => void;
    const done = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const batch: MeteringBatch = { attempts: [], calls: [], settles: [], done, resolve, reject };
    this.#batch = batch;
    setImmediate(() => this.#flush(batch));
    return batch;
  }

  #flush(batch: MeteringBatch): void {
    if (this.#batch !== batch) return;
    this.#batch = undefined;
    const writing = this.#write(batch).then(batch.resolve, batch.reject);
    this.#flushing.add(writing);
    void writing.finally(() => this.#flushing.delete(writing));
  }

  async #write(batch: MeteringBatch): Promise<void> {
    const attempts = [...batch.attempts];
    const calls = [...batch.calls];
    // Settled in one order (by session) by every replica, so two batches never wait on each other's accounts.
    const settles = [...batch.settles].sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
    // Settlements go with the last rows: a call's record commits with its charge, or before it.
    while (attempts.length > 0 || calls.length > 0 || settles.length > 0) {
      const someAttempts = attempts.splice(0, BATCH_ROWS);
      const someCalls = calls.splice(0, BATCH_ROWS - someAttempts.length);
      const params: unknown[] = [];
      // ON CONFLICT: a statement run again (after a deadlock) or a duplicate id never fails the rows beside it.
      const parts = [
        someAttempts.length ? `INSERT INTO attempts (${COLUMN_LIST}, attempt) VALUES ${valuesClause(someAttempts, params)} ON CONFLICT DO NOTHING` : "",
        // The call's record ends its pending row in the same statement (one commit).
        someCalls.length ? `DELETE FROM pending_calls WHERE operation_id = ANY($${params.push(someCalls.map((c) => c[0]))}::text[])` : "",
        // A call reconciled as interrupted while its replica was only cut off: its real record replaces that one.
        someCalls.length
          ? `INSERT INTO calls (${COLUMN_LIST}, attempts) VALUES ${valuesClause(someCalls, params)} ON CONFLICT (operation_id) DO UPDATE SET ${UPDATE_CALL} WHERE calls.outcome = 'interrupted'`
          : "",
      ].filter(Boolean);
      if (attempts.length === 0 && calls.length === 0 && settles.length > 0) {
        const some = settles.splice(0);
        params.push(
          some.map((x) => x[1]),
          some.map((x) => x[2]),
        );
        // unnest yields its rows in array order, and each settle_budget runs as its row is read.
        parts.push(`SELECT settle_budget(s.id, s.amount) FROM unnest($${params.length - 1}::text[], $${params.length}::numeric[]) AS s(id, amount)`);
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

  /** Writes what is queued and waits for writes in flight: a replica reads its own records. */
  async #drain(): Promise<void> {
    if (this.#batch) this.#flush(this.#batch);
    if (this.#flushing.size > 0) await Promise.allSettled([...this.#flushing]);
  }

  async listAttempts(job: string): Promise<AttemptRecord[]> {
    await this.#drain();
    const { rows } = await this.#pool.query<MeteringRow & { attempt: number }>("SELECT * FROM attempts WHERE job = $1 ORDER BY started_at, operation_id, attempt", [job]);
    return rows.map((r) => ({ ...meteringFromRow(r), attempt: r.attempt }));
  }

  async listCalls(job: string): Promise<CallRecord[]> {
    await this.#drain();
    const { rows } = await this.#pool.query<MeteringRow & { attempts: number }>("SELECT * FROM calls WHERE job = $1 ORDER BY started_at, operation_id", [job]);
    return rows.map((r) => ({ ...meteringFromRow(r), attempts: r.attempts }));
  }

  async usageByAgent(job: string): Promise<Map<string, UsageTotals>> {
    await this.#drain();
    const { rows } = await this.#pool.query<Record<"agent" | "calls" | "failed_calls" | "attempts" | "input" | "output" | "cache_read" | "cache_write" | "reasoning", string> & {
      cost: number;
      estimated: boolean;
      providers: string[];
    }>(
      `SELECT agent, COUNT(*) AS calls, SUM(CASE WHEN outcome = 'ok' THEN 0 ELSE 1 END) AS failed_calls, SUM(attempts) AS attempts,
       SUM(input_tokens) AS input, SUM(output_tokens) AS output, SUM(cache_read_tokens) AS cache_read, SUM(cache_write_tokens) AS cache_write,
       SUM(reasoning_tokens) AS reasoning, SUM(cost_usd) AS cost, bool_or(estimated) AS estimated,
       array_agg(DISTINCT provider ORDER BY provider) AS providers
       FROM calls WHERE job = $1 GROUP BY agent ORDER BY agent`,
      [job],
    );
    return new Map(
      rows.map((r) => [
        r.agent,
        {
          calls: Number(r.calls),
          failedCalls: Number(r.failed_calls),
          attempts: Number(r.attempts),
          usage: { input: Number(r.input), output: Number(r.output), cacheRead: Number(r.cache_read), cacheWrite: Number(r.cache_write), reasoning: Number(r.reasoning) },
          costUsd: r.cost,
          estimated: r.estimated,
          providers: r.providers,
        },
      ]),
    );
  }

  async chargedToSession(session: string): Promise<number> {
    await this.#drain();
    const { rows } = await this.#pool.query<{ cost: number }>("SELECT COALESCE(SUM(cost_usd), 0)::double precision AS cost FROM calls WHERE session = $1", [session]);
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
    const { rows } = await this.#pool.query<{ o_amount: string | null; o_limit: string; o_spent: string; o_reserved: string }>(
      "SELECT o_amount, o_limit, o_spent, o_reserved FROM reserve_budget($1, $2, $3::numeric, $4::numeric, $5::numeric, $6, $7)",
      [id, input.session, usd(input.limitUsd), usd(input.worstCaseUsd), usd(input.minimumUsd), input.partial, this.#holdMs],
    );
    const row = rows[0]!;
    if (row.o_amount === null) {
      const available = Number(row.o_limit) - Number(row.o_spent) - Number(row.o_reserved);
      const budget = `$${Number(row.o_limit).toFixed(4)}`;
      if (available <= 0 || available < input.minimumUsd) {
        throw new ProxyError(
          "budget_exhausted",
          `the session's budget of ${budget} is exhausted ($${Number(row.o_spent).toFixed(4)} spent, $${Number(row.o_reserved).toFixed(4)} held by calls in flight on any proxy); the session must end or be given a new token with a budget`,
        );
      }
      throw new ProxyError(
        "budget_exhausted",
        `this call could cost up to $${input.worstCaseUsd.toFixed(4)} but only $${available.toFixed(4)} of the session's ${budget} budget is left; lower max_tokens, stream the call (streams are cut off at the budget), or end the session`,
      );
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
    const batch = this.#currentBatch();
    batch.settles.push([session, reservationId, amount]);
    return batch.done;
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
    await this.#pool.query("DELETE FROM budget_reservations WHERE session = $1 AND state <> 'held' AND NOT EXISTS (SELECT 1 FROM budget_accounts WHERE session = $1)", [session]);
    return (result.rowCount ?? 0) > 0;
  }

  /** Spent and held dollars of a session's account, across every replica. */
  async budgetSnapshot(session: string): Promise<BudgetSnapshot | undefined> {
    const { rows } = await this.#pool.query<{ limit_usd: string; spent_usd: string; reserved_usd: string }>(
      "SELECT limit_usd, spent_usd, reserved_usd FROM budget_accounts WHERE session = $1",
      [session],
    );
    const row = rows[0];
    return row ? { limitUsd: Number(row.limit_usd), spentUsd: Number(row.spent_usd), reservedUsd: Number(row.reserved_usd) } : undefined;
  }

  /** Writes the metering rows still queued, stops listening and sweeping, and closes the pool. */
  async close(): Promise<void> {
    if (this.#sweepTimer) clearInterval(this.#sweepTimer);
    this.#sweepTimer = undefined;
    if (this.#renewTimer) clearInterval(this.#renewTimer);
    this.#renewTimer = undefined;
    await this.#drain();
    await this.#feed.close();
    await this.#pool.end();
  }
}

function notice(change: StoreChange): string {
  return JSON.stringify(change);
}
