// The ProxyStore on SQLite (better-sqlite3), one file under OZ0_LLM_PROXY_DATA,
// for one proxy process: budgets are held in its memory (budget-ledger.ts).
// better-sqlite3 answers synchronously; the methods wrap it in promises.
// Writes are group-committed: every write of one turn of the event loop
// (calls in flight before they go upstream, attempt and call records) is one
// transaction, since a commit costs more than the rows in it.
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { BudgetLedger } from "./budget-ledger.js";
import { SqliteCheckpointer } from "./sqlite-checkpointer.js";
import type {
  AttemptRecord,
  BudgetSnapshot,
  CallRecord,
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
import {
  attemptFromRow,
  callFromRow,
  METERING_COLUMN_LIST,
  METERING_COLUMNS,
  meteringValues,
  PENDING_COLUMNS,
  pendingFromRow,
  pendingValues,
  SQLITE_ENCODING,
  tokenFromRow,
  USAGE_SUMS,
  usageFromRows,
  type MeteringRow,
  type PendingRow,
  type TokenRow,
  type UsageRow,
} from "./store-rows.js";

const METERING_COLUMN_TYPES = `operation_id TEXT NOT NULL, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  provider TEXT NOT NULL, model TEXT NOT NULL, wire TEXT NOT NULL, stream INTEGER NOT NULL, status INTEGER NOT NULL,
  outcome TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL, cache_read_tokens INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL, latency_ms REAL NOT NULL,
  ttft_ms REAL, estimated INTEGER NOT NULL, started_at INTEGER NOT NULL`;

// The tables every call writes are WITHOUT ROWID: a table keyed by a TEXT id is otherwise two
// b-trees (the rows by rowid, and the key's index), and each b-tree a commit touches is one more
// page written to the WAL (a call's two commits: 11 pages -> 7, about a fifth less CPU in a
// micro-run). Files made before keep their tables as they are; the statements are the same.
const SCHEMA = `
CREATE TABLE IF NOT EXISTS secrets (name TEXT PRIMARY KEY, iv BLOB NOT NULL, ciphertext BLOB NOT NULL, tag BLOB NOT NULL,
  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS session_tokens (hash TEXT PRIMARY KEY, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  budget_usd REAL NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER, used_at INTEGER);
CREATE INDEX IF NOT EXISTS session_tokens_by_session ON session_tokens (session);
CREATE TABLE IF NOT EXISTS attempts (${METERING_COLUMN_TYPES}, attempt INTEGER NOT NULL, PRIMARY KEY (operation_id, attempt)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS attempts_by_job ON attempts (job);
CREATE TABLE IF NOT EXISTS calls (${METERING_COLUMN_TYPES}, attempts INTEGER NOT NULL, PRIMARY KEY (operation_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS calls_by_job ON calls (job);
CREATE INDEX IF NOT EXISTS calls_by_session ON calls (session);
CREATE TABLE IF NOT EXISTS pending_calls (operation_id TEXT PRIMARY KEY, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
  provider TEXT NOT NULL, model TEXT NOT NULL, wire TEXT NOT NULL, stream INTEGER NOT NULL, attempt INTEGER NOT NULL,
  started_at INTEGER NOT NULL, attempt_started_at INTEGER NOT NULL, reservation_id TEXT, owner TEXT NOT NULL) WITHOUT ROWID;
`;

const INSERT_METERING = (table: "attempts" | "calls", last: "attempt" | "attempts"): string =>
  `INSERT INTO ${table} (${METERING_COLUMN_LIST}, ${last}) VALUES (${[...METERING_COLUMNS, last].map(() => "?").join(", ")})`;

export interface SqliteProxyStoreOptions {
  /** A directory (the file is `llm-proxy.sqlite` in it), or `:memory:`. */
  dataDir: string;
  /** Metering rows that could not be written (their batch is lost). Default: thrown, as an uncaught error. */
  onWriteError?: (error: unknown) => void;
}

/** The writes of one turn of the event loop, committed together. */
interface WriteBatch {
  writes: (() => void)[];
  /** Settles once the batch is committed (or failed). */
  committed: { promise: Promise<void>; resolve: () => void; reject: (error: unknown) => void };
}

export class SqliteProxyStore implements ProxyStore {
  /** One process: budgets are held in its memory, and no other process changes the file. */
  readonly shared = false;
  readonly #db: Database.Database;
  readonly #statements;
  readonly #ledger: BudgetLedger;
  // Writes go in one transaction per turn of the event loop (group commit): a
  // commit at a time costs more than the rest of a call. Each write resolves
  // once its batch is committed: a call in flight is in the file before its
  // attempt goes out, and a call's record before its answer ends, so a proxy
  // killed after a client has its answer still has the call on record. Every
  // read flushes first.
  #batch: WriteBatch | undefined;
  readonly #onWriteError: (error: unknown) => void;
  /** This store's pending calls carry it; those of any other (a process that died) are reconciled. */
  readonly #owner = randomUUID();
  readonly #checkpointer: SqliteCheckpointer | undefined;

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
    if (file !== ":memory:") {
      // Checkpoints (and their fsync) happen on a thread of their own, never in a commit here.
      this.#db.pragma("wal_autocheckpoint = 0");
      this.#checkpointer = new SqliteCheckpointer({ file, onError: this.#onWriteError });
    }
    this.#db.exec(SCHEMA);
    // A store made before tokens recorded their first use gains the column in place.
    const tokenColumns = this.#db.prepare("PRAGMA table_info(session_tokens)").all() as { name: string }[];
    if (!tokenColumns.some((c) => c.name === "used_at")) {
      // Nothing recorded the use of the tokens already there: count them used, which claims nothing false.
      this.#db.exec(
        "ALTER TABLE session_tokens ADD COLUMN used_at INTEGER; UPDATE session_tokens SET used_at = created_at;",
      );
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
      useToken: db.prepare(
        "UPDATE session_tokens SET used_at = coalesce(used_at, @now) WHERE hash = @hash AND revoked_at IS NULL RETURNING *",
      ),
      tokenUse: db.prepare(
        "SELECT count(*) AS matched, count(used_at) AS used FROM session_tokens WHERE hash = @hash OR session = @session",
      ),
      // Positional parameters: binding twenty named ones per row costs more than the insert.
      insertAttempt: db.prepare(INSERT_METERING("attempts", "attempt")),
      insertCall: db.prepare(INSERT_METERING("calls", "attempts")),
      listAttempts: db.prepare("SELECT * FROM attempts WHERE job = ? ORDER BY started_at, operation_id, attempt"),
      listCalls: db.prepare("SELECT * FROM calls WHERE job = ? ORDER BY started_at, operation_id"),
      usageByAgent:
        db.prepare(`SELECT ${USAGE_SUMS}, MAX(estimated) AS estimated, GROUP_CONCAT(DISTINCT provider) AS providers
        FROM calls WHERE job = ? GROUP BY agent ORDER BY agent`),
      beginCall: db.prepare(
        `INSERT INTO pending_calls (${PENDING_COLUMNS.join(", ")}, owner) VALUES (${[...PENDING_COLUMNS, "owner"].map(() => "?").join(", ")})
         ON CONFLICT (operation_id) DO UPDATE SET attempt = excluded.attempt, attempt_started_at = excluded.attempt_started_at`,
      ),
      endCall: db.prepare("DELETE FROM pending_calls WHERE operation_id = ?"),
      orphanedCalls: db.prepare("DELETE FROM pending_calls WHERE owner <> ? RETURNING *"),
      insertAttemptIfNew: db.prepare(`${INSERT_METERING("attempts", "attempt")} ON CONFLICT DO NOTHING`),
      insertCallIfNew: db.prepare(`${INSERT_METERING("calls", "attempts")} ON CONFLICT DO NOTHING`),
      chargedToSession: db.prepare("SELECT COALESCE(SUM(cost_usd), 0) AS cost FROM calls WHERE session = ?"),
    };
    // Synchronous starting point: a first reservation decides in the same turn as it asks.
    this.#ledger = new BudgetLedger({ spentBefore: (session) => this.#charged(session) });
  }

  async putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }> {
    const replaced = this.#statements.getSecret.get(secret.name) !== undefined;
    this.#statements.insertSecret.run({
      name: secret.name,
      iv: secret.iv,
      ciphertext: secret.ciphertext,
      tag: secret.tag,
      now: now.getTime(),
    });
    return { replaced };
  }

  async getSecret(name: string): Promise<StoredSecret | undefined> {
    const row = this.#statements.getSecret.get(name) as
      { name: string; iv: Buffer; ciphertext: Buffer; tag: Buffer; created_at: number; updated_at: number } | undefined;
    if (!row) return undefined;
    return {
      name: row.name,
      iv: row.iv,
      ciphertext: row.ciphertext,
      tag: row.tag,
      createdAt: new Date(row.created_at),
      updatedAt: new Date(row.updated_at),
    };
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

  async revokeTokens(
    by: { hash?: string; session?: string },
    now: Date,
  ): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    return this.#db.transaction(() => {
      const rows = [
        ...(by.hash ? (this.#statements.tokensByHash.all(by.hash) as TokenRow[]) : []),
        ...(by.session ? (this.#statements.tokensBySession.all(by.session) as TokenRow[]) : []),
      ];
      const unique = new Map(rows.map((r) => [r.hash, r]));
      for (const hash of unique.keys()) this.#statements.revokeToken.run(now.getTime(), hash);
      const counts = this.#statements.tokenUse.get({ hash: by.hash ?? null, session: by.session ?? null }) as {
        matched: number;
        used: number;
      };
      return {
        ended: [...unique.values()].map((r) => ({ ...tokenFromRow(r), revokedAt: now })),
        use: tokenUse(counts),
      };
    })();
  }

  recordAttempt(attempt: AttemptRecord): Promise<void> {
    const values = [...meteringValues(attempt, SQLITE_ENCODING), attempt.attempt];
    return this.#enqueue(() => this.#statements.insertAttempt.run(values));
  }

  recordCall(call: CallRecord): Promise<void> {
    const values = [...meteringValues(call, SQLITE_ENCODING), call.attempts];
    // The call's record and the end of its pending row commit in one transaction (the batch's).
    return this.#enqueue(() => {
      this.#statements.insertCall.run(values);
      this.#statements.endCall.run(call.operationId);
    });
  }

  beginAttempt(pending: PendingAttempt): Promise<void> {
    // It must be in the file before the attempt goes out: it resolves once its batch commits.
    // In WAL mode with synchronous = NORMAL a commit is a write to the WAL, no fsync, and
    // survives the process being killed (not a power cut, like every other row here).
    const values = [...pendingValues(pending, SQLITE_ENCODING), this.#owner];
    return this.#enqueue(() => this.#statements.beginCall.run(values));
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
        this.#statements.insertAttemptIfNew.run([...meteringValues(attempt, SQLITE_ENCODING), attempt.attempt]);
        if (this.#statements.insertCallIfNew.run([...meteringValues(call, SQLITE_ENCODING), call.attempts]).changes > 0)
          made.push(call);
      }
      return made;
    })();
  }

  /** Resolves once the write's batch is committed. */
  #enqueue(write: () => void): Promise<void> {
    let batch = this.#batch;
    if (!batch) {
      batch = { writes: [], committed: deferred() };
      // Its writers see a failure; the uncaught one is for onWriteError.
      batch.committed.promise.catch(() => undefined);
      this.#batch = batch;
      setImmediate(() => this.#flushQueued());
    }
    batch.writes.push(write);
    return batch.committed.promise;
  }

  #flushQueued(): void {
    try {
      this.flush();
    } catch (error) {
      this.#onWriteError(error);
    }
  }

  /** Writes what is queued now, in one transaction. */
  flush(): void {
    const batch = this.#batch;
    if (!batch) return;
    this.#batch = undefined;
    try {
      this.#db.transaction(() => {
        for (const write of batch.writes) write();
      })();
    } catch (error) {
      batch.committed.reject(error);
      throw error;
    }
    batch.committed.resolve();
  }

  async listAttempts(job: string): Promise<AttemptRecord[]> {
    this.flush();
    return (this.#statements.listAttempts.all(job) as (MeteringRow & { attempt: number })[]).map(attemptFromRow);
  }

  async listCalls(job: string): Promise<CallRecord[]> {
    this.flush();
    return (this.#statements.listCalls.all(job) as (MeteringRow & { attempts: number })[]).map(callFromRow);
  }

  async usageByAgent(job: string): Promise<Map<string, UsageTotals>> {
    this.flush();
    return usageFromRows(this.#statements.usageByAgent.all(job) as UsageRow[]);
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
    await this.#checkpointer?.close();
    this.#db.close();
  }
}

function deferred(): WriteBatch["committed"] {
  let resolve!: () => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
