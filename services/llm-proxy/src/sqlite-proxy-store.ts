// The ProxyStore on SQLite (better-sqlite3), one file under OZ0_LLM_PROXY_DATA,
// for one proxy process: budgets are held in its memory (budget-ledger.ts).
// better-sqlite3 answers synchronously; the methods wrap it in promises.
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { BudgetLedger } from "./budget-ledger.js";
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
  StoredSecret,
  TokenRecord,
  UsageTotals,
} from "./proxy-store.js";
import { interruptedRecords, tokenUse, type TokenUseAnswer } from "./proxy-store.js";

const METERING_COLUMNS = `operation_id TEXT NOT NULL, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  provider TEXT NOT NULL, model TEXT NOT NULL, wire TEXT NOT NULL, stream INTEGER NOT NULL, status INTEGER NOT NULL,
  outcome TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, latency_ms REAL NOT NULL,
  ttft_ms REAL, estimated INTEGER NOT NULL, started_at INTEGER NOT NULL`;

const SCHEMA = `
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, iv BLOB NOT NULL, ciphertext BLOB NOT NULL, tag BLOB NOT NULL,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS session_tokens (hash TEXT PRIMARY KEY, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  budget_usd REAL NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER, used_at INTEGER);
CREATE INDEX IF NOT EXISTS session_tokens_by_session ON session_tokens (session);
CREATE TABLE IF NOT EXISTS attempts (${METERING_COLUMNS}, attempt INTEGER NOT NULL, PRIMARY KEY (operation_id, attempt));
CREATE INDEX IF NOT EXISTS attempts_by_job ON attempts (job);
CREATE TABLE IF NOT EXISTS calls (${METERING_COLUMNS}, attempts INTEGER NOT NULL, PRIMARY KEY (operation_id));
CREATE INDEX IF NOT EXISTS calls_by_job ON calls (job);
CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session);
CREATE TABLE IF NOT EXISTS pending_calls (operation_id TEXT PRIMARY KEY, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  provider TEXT NOT NULL, model TEXT NOT NULL, wire TEXT NOT NULL, stream INTEGER NOT NULL, attempt INTEGER NOT NULL,
  started_at INTEGER NOT NULL, attempt_started_at INTEGER NOT NULL, reservation_id TEXT, owner TEXT NOT NULL);
`;

interface MeteringRow {
  operation_id: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: string;
  stream: number;
  status: number;
  outcome: string;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number;
  cost_usd: number;
  latency_ms: number;
  ttft_ms: number | null;
  estimated: number;
  started_at: number;
}

function meteringParams(record: AttemptRecord | CallRecord): Record<string, unknown> {
  return {
    operation_id: record.operationId,
    job: record.job,
    agent: record.agent,
    session: record.session,
    provider: record.provider,
    model: record.model,
    wire: record.wire,
    stream: record.stream ? 1 : 0,
    status: record.status,
    outcome: record.outcome,
    input_tokens: record.usage.input,
    output_tokens: record.usage.output,
    cache_read_tokens: record.usage.cacheRead,
    cache_write_tokens: record.usage.cacheWrite,
    reasoning_tokens: record.usage.reasoning,
    cost_usd: record.costUsd,
    latency_ms: record.latencyMs,
    ttft_ms: record.ttftMs ?? null,
    estimated: record.estimated ? 1 : 0,
    started_at: record.startedAt.getTime(),
  };
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
    stream: row.stream === 1,
    status: row.status,
    outcome: row.outcome as Outcome,
    usage: {
      input: row.input_tokens,
      output: row.output_tokens,
      cacheRead: row.cache_read_tokens,
      cacheWrite: row.cache_write_tokens,
      reasoning: row.reasoning_tokens,
    },
    costUsd: row.cost_usd,
    latencyMs: row.latency_ms,
    ...(row.ttft_ms === null ? {} : { ttftMs: row.ttft_ms }),
    estimated: row.estimated === 1,
    startedAt: new Date(row.started_at),
  };
}

const COLUMN_LIST =
  "operation_id, job, agent, session, provider, model, wire, stream, status, outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, latency_ms, ttft_ms, estimated, started_at";
const VALUE_LIST = COLUMN_LIST.split(", ")
  .map((c) => `@${c}`)
  .join(", ");

export interface SqliteProxyStoreOptions {
  /** A directory (the file is `llm-proxy.sqlite` in it), or `:memory:`. */
  dataDir: string;
  /** Metering rows that could not be written (their batch is lost). Default: thrown, as an uncaught error. */
  onWriteError?: (error: unknown) => void;
}

const STORED = Promise.resolve();

export class SqliteProxyStore implements ProxyStore {
  /** One process: budgets are held in its memory, and no other process changes the file. */
  readonly shared = false;
  readonly #db: Database.Database;
  readonly #statements;
  readonly #ledger: BudgetLedger;
  // Metering rows are written in one transaction per turn of the event loop:
  // a row at a time costs more than the rest of a call. Every read flushes
  // first, so a queued row is already visible to every reader (all in this
  // process): recordAttempt and recordCall resolve at once.
  #pending: (() => void)[] = [];
  readonly #onWriteError: (error: unknown) => void;
  /** This store's pending calls carry it; those of any other (a process that died) are reconciled. */
  readonly #owner = randomUUID();

  constructor(options: SqliteProxyStoreOptions) {
    let file = ":memory:";
    if (options.dataDir !== ":memory:") {
      mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
      file = path.join(options.dataDir, "llm-proxy.sqlite");
    }
    this.#onWriteError =
      options.onWriteError ??
      ((error) => {
        throw error;
      });
    this.#db = new Database(file);
    this.#db.pragma("journal_mode = WAL");
    // Metering rows lost in a power cut are acceptable; a slow fsync per call is not.
    this.#db.pragma("synchronous = NORMAL");
    this.#db.exec(SCHEMA);
    // A store made before tokens recorded their first use gains the column in place.
    const tokenColumns = this.#db.prepare("PRAGMA table_info(session_tokens)").all() as { name: string }[];
    if (!tokenColumns.some((c) => c.name === "used_at")) {
      // Nothing recorded the use of the tokens already there: count them used, which claims nothing false.
      this.#db.exec("ALTER TABLE session_tokens ADD COLUMN used_at INTEGER; UPDATE session_tokens SET used_at = created_at;");
    }
    const db = this.#db;
    this.#statements = {
      getSecret: db.prepare("SELECT * FROM secrets WHERE name = ?"),
      insertSecret: db.prepare(
        "INSERT INTO secrets (name, iv, ciphertext, tag, created_at, updated_at) VALUES (@name, @iv, @ciphertext, @tag, @now, @now) ON CONFLICT (name) DO UPDATE SET iv = @iv, ciphertext = @ciphertext, tag = @tag, updated_at = @now",
      ),
      deleteSecret: db.prepare("DELETE FROM secrets WHERE name = ?"),
      listSecrets: db.prepare("SELECT name, created_at, updated_at FROM secrets ORDER BY name"),
      putToken: db.prepare(
        "INSERT INTO session_tokens (hash, job, agent, session, budget_usd, created_at, revoked_at) VALUES (@hash, @job, @agent, @session, @budget_usd, @created_at, NULL)",
      ),
      findToken: db.prepare("SELECT * FROM session_tokens WHERE hash = ?"),
      tokensByHash: db.prepare("SELECT * FROM session_tokens WHERE hash = ? AND revoked_at IS NULL"),
      tokensBySession: db.prepare("SELECT * FROM session_tokens WHERE session = ? AND revoked_at IS NULL"),
      revokeToken: db.prepare("UPDATE session_tokens SET revoked_at = ? WHERE hash = ?"),
      useToken: db.prepare("UPDATE session_tokens SET used_at = coalesce(used_at, @now) WHERE hash = @hash AND revoked_at IS NULL RETURNING *"),
      tokenUse: db.prepare("SELECT count(*) AS matched, count(used_at) AS used FROM session_tokens WHERE hash = @hash OR session = @session"),
      insertAttempt: db.prepare(`INSERT INTO attempts (${COLUMN_LIST}, attempt) VALUES (${VALUE_LIST}, @attempt)`),
      insertCall: db.prepare(`INSERT INTO calls (${COLUMN_LIST}, attempts) VALUES (${VALUE_LIST}, @attempts)`),
      listAttempts: db.prepare("SELECT * FROM attempts WHERE job = ? ORDER BY started_at, operation_id, attempt"),
      listCalls: db.prepare("SELECT * FROM calls WHERE job = ? ORDER BY started_at, operation_id"),
      usageByAgent: db.prepare(`SELECT agent, COUNT(*) AS calls, SUM(CASE WHEN outcome = 'ok' THEN 0 ELSE 1 END) AS failed_calls,
        SUM(attempts) AS attempts, SUM(input_tokens) AS input, SUM(output_tokens) AS output, SUM(cache_read_tokens) AS cache_read,
        SUM(cache_write_tokens) AS cache_write, SUM(reasoning_tokens) AS reasoning, SUM(cost_usd) AS cost, MAX(estimated) AS estimated,
        GROUP_CONCAT(DISTINCT provider) AS providers
        FROM calls WHERE job = ? GROUP BY agent ORDER BY agent`),
      beginCall: db.prepare(
        `INSERT INTO pending_calls (operation_id, job, agent, session, provider, model, wire, stream, attempt, started_at, attempt_started_at, reservation_id, owner)
         VALUES (@operation_id, @job, @agent, @session, @provider, @model, @wire, @stream, @attempt, @started_at, @attempt_started_at, @reservation_id, @owner)
         ON CONFLICT (operation_id) DO UPDATE SET attempt = @attempt, attempt_started_at = @attempt_started_at`,
      ),
      endCall: db.prepare("DELETE FROM pending_calls WHERE operation_id = ?"),
      orphanedCalls: db.prepare("DELETE FROM pending_calls WHERE owner <> ? RETURNING *"),
      insertAttemptIfNew: db.prepare(`INSERT INTO attempts (${COLUMN_LIST}, attempt) VALUES (${VALUE_LIST}, @attempt) ON CONFLICT DO NOTHING`),
      insertCallIfNew: db.prepare(`INSERT INTO calls (${COLUMN_LIST}, attempts) VALUES (${VALUE_LIST}, @attempts) ON CONFLICT DO NOTHING`),
      chargedToSession: db.prepare("SELECT COALESCE(SUM(cost_usd), 0) AS cost FROM calls WHERE session = ?"),
    };
    // Synchronous starting point: a first reservation decides in the same turn as it asks.
    this.#ledger = new BudgetLedger({ spentBefore: (session) => this.#charged(session) });
  }

  async putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }> {
    const replaced = this.#statements.getSecret.get(secret.name) !== undefined;
    this.#statements.insertSecret.run({ name: secret.name, iv: secret.iv, ciphertext: secret.ciphertext, tag: secret.tag, now: now.getTime() });
    return { replaced };
  }

  async getSecret(name: string): Promise<StoredSecret | undefined> {
    const row = this.#statements.getSecret.get(name) as
      | { name: string; iv: Buffer; ciphertext: Buffer; tag: Buffer; created_at: number; updated_at: number }
      | undefined;
    if (!row) return undefined;
    return { name: row.name, iv: row.iv, ciphertext: row.ciphertext, tag: row.tag, createdAt: new Date(row.created_at), updatedAt: new Date(row.updated_at) };
  }

  async deleteSecret(name: string): Promise<boolean> {
    return this.#statements.deleteSecret.run(name).changes > 0;
  }

  async listSecrets(): Promise<SecretInfo[]> {
    const rows = this.#statements.listSecrets.all() as { name: string; created_at: number; updated_at: number }[];
    return rows.map((r) => ({ name: r.name, createdAt: new Date(r.created_at), updatedAt: new Date(r.updated_at) }));
  }

  async putToken(token: TokenRecord): Promise<void> {
    this.#statements.putToken.run({
      hash: token.hash,
      job: token.job,
      agent: token.agent,
      session: token.session,
      budget_usd: token.budgetUsd,
      created_at: token.createdAt.getTime(),
    });
  }

  async findToken(hash: string): Promise<TokenRecord | undefined> {
    const row = this.#statements.findToken.get(hash) as TokenRow | undefined;
    return row ? tokenFromRow(row) : undefined;
  }

  async useToken(hash: string, now: Date): Promise<TokenRecord | undefined> {
    const row = this.#statements.useToken.get({ hash, now: now.getTime() }) as TokenRow | undefined;
    return row ? tokenFromRow(row) : undefined;
  }

  async revokeTokens(by: { hash?: string; session?: string }, now: Date): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    return this.#db.transaction(() => {
      const rows = [
        ...(by.hash ? (this.#statements.tokensByHash.all(by.hash) as TokenRow[]) : []),
        ...(by.session ? (this.#statements.tokensBySession.all(by.session) as TokenRow[]) : []),
      ];
      const unique = new Map(rows.map((r) => [r.hash, r]));
      for (const hash of unique.keys()) this.#statements.revokeToken.run(now.getTime(), hash);
      const counts = this.#statements.tokenUse.get({ hash: by.hash ?? null, session: by.session ?? null }) as { matched: number; used: number };
      return { ended: [...unique.values()].map((r) => ({ ...tokenFromRow(r), revokedAt: now })), use: tokenUse(counts) };
    })();
  }

  recordAttempt(attempt: AttemptRecord): Promise<void> {
    const params = { ...meteringParams(attempt), attempt: attempt.attempt };
    return this.#enqueue(() => this.#statements.insertAttempt.run(params));
  }

  recordCall(call: CallRecord): Promise<void> {
    const params = { ...meteringParams(call), attempts: call.attempts };
    // The call's record and the end of its pending row commit in one transaction (the batch's).
    return this.#enqueue(() => {
      this.#statements.insertCall.run(params);
      this.#statements.endCall.run(call.operationId);
    });
  }

  async beginAttempt(pending: PendingAttempt): Promise<void> {
    // Written at once, not batched: it must be in the file before the attempt goes out. In WAL
    // mode with synchronous = NORMAL a commit is a write to the WAL, no fsync, and survives the
    // process being killed (not a power cut, like every other row here).
    this.#statements.beginCall.run({
      operation_id: pending.operationId,
      job: pending.job,
      agent: pending.agent,
      session: pending.session,
      provider: pending.provider,
      model: pending.model,
      wire: pending.wire,
      stream: pending.stream ? 1 : 0,
      attempt: pending.attempt,
      started_at: pending.startedAt.getTime(),
      attempt_started_at: pending.attemptStartedAt.getTime(),
      reservation_id: pending.reservationId ?? null,
      owner: this.#owner,
    });
  }

  async reconcileInterrupted(): Promise<CallRecord[]> {
    this.flush();
    // Budget holds of SQLite live in the memory of the process that made them: the dead
    // process's are gone with it, and an account opened now starts from the calls' charges.
    return this.#db.transaction(() => {
      const rows = this.#statements.orphanedCalls.all(this.#owner) as PendingRow[];
      const made: CallRecord[] = [];
      for (const row of rows) {
        const { call, attempt } = interruptedRecords(pendingFromRow(row));
        this.#statements.insertAttemptIfNew.run({ ...meteringParams(attempt), attempt: attempt.attempt });
        if (this.#statements.insertCallIfNew.run({ ...meteringParams(call), attempts: call.attempts }).changes > 0) made.push(call);
      }
      return made;
    })();
  }

  #enqueue(write: () => void): Promise<void> {
    if (this.#pending.length === 0) setImmediate(() => this.#flushQueued());
    this.#pending.push(write);
    return STORED;
  }

  #flushQueued(): void {
    try {
      this.flush();
    } catch (error) {
      this.#onWriteError(error);
    }
  }

  /** Writes queued metering rows now. */
  flush(): void {
    if (this.#pending.length === 0) return;
    const writes = this.#pending;
    this.#pending = [];
    this.#db.transaction(() => {
      for (const write of writes) write();
    })();
  }

  async listAttempts(job: string): Promise<AttemptRecord[]> {
    this.flush();
    const rows = this.#statements.listAttempts.all(job) as (MeteringRow & { attempt: number })[];
    return rows.map((r) => ({ ...meteringFromRow(r), attempt: r.attempt }));
  }

  async listCalls(job: string): Promise<CallRecord[]> {
    this.flush();
    const rows = this.#statements.listCalls.all(job) as (MeteringRow & { attempts: number })[];
    return rows.map((r) => ({ ...meteringFromRow(r), attempts: r.attempts }));
  }

  async usageByAgent(job: string): Promise<Map<string, UsageTotals>> {
    this.flush();
    const rows = this.#statements.usageByAgent.all(job) as {
      agent: string;
      calls: number;
      failed_calls: number;
      attempts: number;
      input: number;
      output: number;
      cache_read: number;
      cache_write: number;
      reasoning: number;
      cost: number;
      estimated: number;
      /** Comma-separated: provider names never hold a comma. */
      providers: string | null;
    }[];
    return new Map(
      rows.map((r) => [
        r.agent,
        {
          calls: r.calls,
          failedCalls: r.failed_calls,
          attempts: r.attempts,
          usage: { input: r.input, output: r.output, cacheRead: r.cache_read, cacheWrite: r.cache_write, reasoning: r.reasoning },
          costUsd: r.cost,
          estimated: r.estimated === 1,
          providers: r.providers ? r.providers.split(",").sort() : [],
        },
      ]),
    );
  }

  async chargedToSession(session: string): Promise<number> {
    return this.#charged(session);
  }

  #charged(session: string): number {
    this.flush();
    return (this.#statements.chargedToSession.get(session) as { cost: number }).cost;
  }

  reserveBudget(input: ReserveInput): Promise<Reservation> {
    return this.#ledger.reserve(input);
  }

  async forgetBudget(session: string): Promise<boolean> {
    return this.#ledger.forget(session);
  }

  async budgetSnapshot(session: string): Promise<BudgetSnapshot | undefined> {
    return this.#ledger.snapshot(session);
  }

  watch(): () => void {
    return () => undefined;
  }

  async close(): Promise<void> {
    this.flush();
    this.#db.close();
  }
}

interface PendingRow {
  operation_id: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: string;
  stream: number;
  attempt: number;
  started_at: number;
  attempt_started_at: number;
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
    stream: row.stream === 1,
    attempt: row.attempt,
    startedAt: new Date(row.started_at),
    attemptStartedAt: new Date(row.attempt_started_at),
    ...(row.reservation_id === null ? {} : { reservationId: row.reservation_id }),
  };
}

interface TokenRow {
  hash: string;
  job: string;
  agent: string;
  session: string;
  budget_usd: number;
  created_at: number;
  revoked_at: number | null;
  used_at: number | null;
}

function tokenFromRow(row: TokenRow): TokenRecord {
  return {
    hash: row.hash,
    job: row.job,
    agent: row.agent,
    session: row.session,
    budgetUsd: row.budget_usd,
    createdAt: new Date(row.created_at),
    ...(row.revoked_at === null ? {} : { revokedAt: new Date(row.revoked_at) }),
    ...(row.used_at === null ? {} : { usedAt: new Date(row.used_at) }),
  };
}
