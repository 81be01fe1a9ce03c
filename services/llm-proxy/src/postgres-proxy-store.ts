// The proxy's store on PostgreSQL, for several proxy replicas: secrets,
// session tokens, metering records and, unlike the SQLite store, the budget
// ledger itself. With one proxy, BudgetLedger holds accounts in memory; with
// several, each would hold its own view and together they could overspend.
// Here an account is a row, and a reservation locks it (SELECT ... FOR UPDATE)
// so concurrent reservations from any replica are serialised per session.
// Amounts are `numeric`, so holds and settlements add up exactly.
//
// ProxyStore (proxy-store.ts) is synchronous, built for better-sqlite3;
// node-postgres cannot answer synchronously, so this class implements the
// same methods returning promises (AsyncProxyStore below). Making the proxy
// use it needs ProxyStore's callers to await (see the issue 13 report).
import { randomUUID } from "node:crypto";
import pg from "pg";
import type { ReserveInput } from "./budget-ledger.js";
import { ProxyError } from "./proxy-error.js";
import type { AttemptRecord, CallRecord, Outcome, ProxyStore, SecretInfo, StoredSecret, TokenRecord, UsageTotals } from "./proxy-store.js";

/** ProxyStore with every method answering through a promise: what a networked database can implement. */
export type AsyncProxyStore = {
  [K in keyof ProxyStore]: (...args: Parameters<ProxyStore[K]>) => Promise<ReturnType<ProxyStore[K]>>;
};

/** A hold on part of a session's budget, stored so every replica counts it. Settle it once. */
export interface StoredReservation {
  readonly id: string;
  readonly session: string;
  /** Dollars held: the call may spend up to this much. */
  readonly amountUsd: number;
  settle(actualUsd: number): Promise<void>;
}

export interface BudgetSnapshot {
  limitUsd: number;
  spentUsd: number;
  reservedUsd: number;
}

export interface PostgresProxyStoreOptions {
  connectionString: string;
  /**
   * Schema of the proxy's tables, created when missing. Default `oz0_llm_proxy`.
   * Secrets live here: in production give the proxy a database role of its own
   * that only it can use, so no other service can read them.
   */
  schema?: string;
  maxConnections?: number;
  /**
   * How long a reservation holds budget before `releaseExpiredReservations`
   * frees it: the hold of a replica that died mid-call. Longer than any call.
   * Default 15 minutes.
   */
  reservationHoldMs?: number;
}

const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

const METERING_COLUMNS = `operation_id text NOT NULL, job text NOT NULL, agent text NOT NULL, session text NOT NULL,
  provider text NOT NULL, model text NOT NULL, wire text NOT NULL, stream boolean NOT NULL, status integer NOT NULL,
  outcome text NOT NULL, input_tokens bigint NOT NULL, output_tokens bigint NOT NULL, cache_read_tokens bigint NOT NULL,
  cache_write_tokens bigint NOT NULL, reasoning_tokens bigint NOT NULL, cost_usd double precision NOT NULL,
  latency_ms double precision NOT NULL, ttft_ms double precision, estimated boolean NOT NULL, started_at timestamptz NOT NULL`;

/** Append only: never edit one that has been applied somewhere. */
const MIGRATIONS: readonly { version: number; sql: string }[] = [
  {
    version: 1,
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
    wire: row.wire as "anthropic" | "openai",
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
  };
}

// Dollars go to `numeric` as decimal text, so 0.1 + 0.2 is 0.3 in the ledger.
function usd(value: number): string {
  if (!Number.isFinite(value) || value < 0) throw new ProxyError("invalid_argument", `a dollar amount must be a finite number ≥ 0, not ${value}`);
  return String(value);
}

export class PostgresProxyStore implements AsyncProxyStore {
  readonly #pool: pg.Pool;
  readonly #holdMs: number;

  private constructor(pool: pg.Pool, holdMs: number) {
    this.#pool = pool;
    this.#holdMs = holdMs;
  }

  /** Connects and migrates under an advisory lock, so replicas starting together apply each version once. */
  static async open(options: PostgresProxyStoreOptions): Promise<PostgresProxyStore> {
    const schema = options.schema ?? "oz0_llm_proxy";
    if (!SCHEMA_NAME.test(schema)) throw new ProxyError("invalid_argument", `schema name ${JSON.stringify(schema)} must be lower-case letters, digits and underscores`);
    const pool = new pg.Pool({ connectionString: options.connectionString, max: options.maxConnections ?? 10, options: `-c search_path=${schema}` });
    pool.on("error", () => undefined);
    const store = new PostgresProxyStore(pool, options.reservationHoldMs ?? 15 * 60_000);
    try {
      await store.#transaction(async (client) => {
        await client.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`oz0.migrations:${schema}:llm-proxy`]);
        // Only when missing: CREATE SCHEMA IF NOT EXISTS still needs CREATE on the database, which a locked-down role lacks.
        const exists = await client.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
        if (exists.rowCount === 0) await client.query(`CREATE SCHEMA ${schema}`);
        await client.query(`SET LOCAL search_path TO ${schema}`);
        await client.query(
          "CREATE TABLE IF NOT EXISTS oz0_migrations (component text NOT NULL, version integer NOT NULL, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))",
        );
        const applied = await client.query<{ version: number }>("SELECT version FROM oz0_migrations WHERE component = 'llm-proxy'");
        const done = new Set(applied.rows.map((r) => r.version));
        for (const migration of MIGRATIONS) {
          if (done.has(migration.version)) continue;
          await client.query(migration.sql);
          await client.query("INSERT INTO oz0_migrations (component, version, name) VALUES ('llm-proxy', $1, $2)", [migration.version, `llm-proxy ${migration.version}`]);
        }
      });
    } catch (error) {
      await pool.end();
      throw error;
    }
    return store;
  }

  async #transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const client = await this.#pool.connect();
    try {
      await client.query("BEGIN");
      const result = await fn(client);
      await client.query("COMMIT");
      return result;
    } catch (error) {
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    } finally {
      client.release();
    }
  }

  async putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }> {
    // xmax is 0 on a freshly inserted row and set on one the upsert updated.
    const { rows } = await this.#pool.query<{ replaced: boolean }>(
      `INSERT INTO secrets (name, iv, ciphertext, tag, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)
       ON CONFLICT (name) DO UPDATE SET iv = excluded.iv, ciphertext = excluded.ciphertext, tag = excluded.tag, updated_at = excluded.updated_at
       RETURNING (xmax <> 0) AS replaced`,
      [secret.name, secret.iv, secret.ciphertext, secret.tag, now],
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
    const result = await this.#pool.query("DELETE FROM secrets WHERE name = $1", [name]);
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

  async revokeTokens(by: { hash?: string; session?: string }, now: Date): Promise<TokenRecord[]> {
    // One statement: two replicas revoking at once each report only the tokens they ended.
    const { rows } = await this.#pool.query<TokenRow>(
      "UPDATE session_tokens SET revoked_at = $3 WHERE revoked_at IS NULL AND (hash = $1 OR session = $2) RETURNING *",
      [by.hash ?? null, by.session ?? null, now],
    );
    return rows.map(tokenFromRow);
  }

  async recordAttempt(attempt: AttemptRecord): Promise<void> {
    await this.#pool.query(
      `INSERT INTO attempts (${COLUMN_LIST}, attempt) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
      [...meteringValues(attempt), attempt.attempt],
    );
  }

  async recordCall(call: CallRecord): Promise<void> {
    await this.#pool.query(
      `INSERT INTO calls (${COLUMN_LIST}, attempts) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`,
      [...meteringValues(call), call.attempts],
    );
  }

  async listAttempts(job: string): Promise<AttemptRecord[]> {
    const { rows } = await this.#pool.query<MeteringRow & { attempt: number }>("SELECT * FROM attempts WHERE job = $1 ORDER BY started_at, operation_id, attempt", [job]);
    return rows.map((r) => ({ ...meteringFromRow(r), attempt: r.attempt }));
  }

  async listCalls(job: string): Promise<CallRecord[]> {
    const { rows } = await this.#pool.query<MeteringRow & { attempts: number }>("SELECT * FROM calls WHERE job = $1 ORDER BY started_at, operation_id", [job]);
    return rows.map((r) => ({ ...meteringFromRow(r), attempts: r.attempts }));
  }

  async usageByAgent(job: string): Promise<Map<string, UsageTotals>> {
    const { rows } = await this.#pool.query<Record<"agent" | "calls" | "failed_calls" | "attempts" | "input" | "output" | "cache_read" | "cache_write" | "reasoning", string> & {
      cost: number;
      estimated: boolean;
    }>(
      `SELECT agent, COUNT(*) AS calls, SUM(CASE WHEN outcome = 'ok' THEN 0 ELSE 1 END) AS failed_calls, SUM(attempts) AS attempts,
       SUM(input_tokens) AS input, SUM(output_tokens) AS output, SUM(cache_read_tokens) AS cache_read, SUM(cache_write_tokens) AS cache_write,
       SUM(reasoning_tokens) AS reasoning, SUM(cost_usd) AS cost, bool_or(estimated) AS estimated
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
        },
      ]),
    );
  }

  async chargedToSession(session: string): Promise<number> {
    const { rows } = await this.#pool.query<{ cost: number }>("SELECT COALESCE(SUM(cost_usd), 0)::double precision AS cost FROM calls WHERE session = $1", [session]);
    return rows[0]!.cost;
  }

  /**
   * Holds budget for one call, or throws `budget_exhausted`; the same rules as
   * BudgetLedger.reserve, but the account is a row locked for the decision,
   * so proxies on any number of replicas never hold more than the limit. An
   * account first seen starts from what the session's calls were charged.
   */
  async reserve(input: Omit<ReserveInput, "spentBefore">): Promise<StoredReservation> {
    const held = await this.#transaction(async (client) => {
      await client.query(
        `INSERT INTO budget_accounts (session, limit_usd, spent_usd, reserved_usd)
         SELECT $1, $2::numeric, COALESCE(SUM(cost_usd), 0)::numeric, 0 FROM calls WHERE session = $1
         ON CONFLICT (session) DO NOTHING`,
        [input.session, usd(input.limitUsd)],
      );
      const { rows } = await client.query<{ limit_usd: string; spent_usd: string; reserved_usd: string; available: string }>(
        "SELECT limit_usd, spent_usd, reserved_usd, limit_usd - spent_usd - reserved_usd AS available FROM budget_accounts WHERE session = $1 FOR UPDATE",
        [input.session],
      );
      const account = rows[0]!;
      const available = Number(account.available);
      const budget = `$${Number(account.limit_usd).toFixed(4)}`;
      if (available <= 0 || available < input.minimumUsd) {
        throw new ProxyError(
          "budget_exhausted",
          `the session's budget of ${budget} is exhausted ($${Number(account.spent_usd).toFixed(4)} spent, $${Number(account.reserved_usd).toFixed(4)} held by calls in flight on any proxy); the session must end or be given a new token with a budget`,
        );
      }
      if (!input.partial && input.worstCaseUsd > available) {
        throw new ProxyError(
          "budget_exhausted",
          `this call could cost up to $${input.worstCaseUsd.toFixed(4)} but only $${available.toFixed(4)} of the session's ${budget} budget is left; lower max_tokens, stream the call (streams are cut off at the budget), or end the session`,
        );
      }
      // The exact decimal that is left, when the call may hold less than its worst case.
      const amount = input.worstCaseUsd <= available ? usd(input.worstCaseUsd) : account.available;
      const id = randomUUID();
      await client.query("UPDATE budget_accounts SET reserved_usd = reserved_usd + $2::numeric WHERE session = $1", [input.session, amount]);
      await client.query(
        `INSERT INTO budget_reservations (id, session, amount_usd, state, created_at, expires_at)
         VALUES ($1, $2, $3::numeric, 'held', now(), now() + $4 * interval '1 millisecond')`,
        [id, input.session, amount, this.#holdMs],
      );
      return { id, amount: Number(amount) };
    });
    return { id: held.id, session: input.session, amountUsd: held.amount, settle: (actualUsd) => this.settle(held.id, actualUsd) };
  }

  /** Ends a hold, charging what the call cost. A second settle of the same reservation does nothing. */
  async settle(reservationId: string, actualUsd: number): Promise<void> {
    await this.#transaction(async (client) => {
      const { rows } = await client.query<{ session: string; amount_usd: string; state: string }>(
        "SELECT session, amount_usd, state FROM budget_reservations WHERE id = $1 FOR UPDATE",
        [reservationId],
      );
      const reservation = rows[0];
      if (!reservation || reservation.state === "settled") return;
      await client.query("UPDATE budget_reservations SET state = 'settled', actual_usd = $2::numeric WHERE id = $1", [reservationId, usd(actualUsd)]);
      // An expired hold was already given back by the sweep: only the spend is left to count.
      const release = reservation.state === "held" ? reservation.amount_usd : "0";
      await client.query("UPDATE budget_accounts SET reserved_usd = reserved_usd - $2::numeric, spent_usd = spent_usd + $3::numeric WHERE session = $1", [
        reservation.session,
        release,
        usd(actualUsd),
      ]);
    });
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
   * Drops a session's account once its tokens are revoked (BudgetLedger.forget's
   * counterpart), so the table does not grow without end. Only an account with
   * no call in flight is dropped: a hold settled after its account was dropped
   * would be charged to nothing, or twice to a new account started from the
   * calls table. Returns whether it was dropped; try again after the calls end.
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

  async close(): Promise<void> {
    await this.#pool.end();
  }
}
