// The ProxyStore on SQLite (better-sqlite3), one file under OZ0_LLM_PROXY_DATA,
// for one proxy process: budgets and counts of model calls are held in its
// memory (budget-ledger.ts, model-call-ledger.ts).
// better-sqlite3 answers synchronously; the methods wrap it in promises.
// Writes are group-committed while calls overlap: every write of one turn of
// the event loop (calls in flight before they go upstream, attempt and call
// records) is one transaction, since a commit costs more than the rows in it.
// A call alone commits at once: there is nothing to group it with. With a
// data directory, a call alone is instead written to a file of slots
// (in-flight-slots.ts): one `pwrite` before its attempt and one per record
// instead of a commit each, and so are every token minted and its first use;
// those rows are committed up to a second later, with whatever else waits
// (or with the next read or revocation, which commit what waits first, or
// once 48 wait).
// Calls that overlap keep to the group commit: under load a commit shared by
// a turn's calls costs each less than its own system calls for slots did
// (the bench's CPU a call at 16 connections rose 15–40% with slots for all).
import { randomUUID } from "node:crypto";
import path from "node:path";
import Database from "better-sqlite3";
import { lockDataDirectory, SqliteCheckpointer, type DataDirectoryLock } from "@oz0/sqlite";
import { BudgetLedger } from "./budget-ledger.js";
import { InFlightSlots, slotFileAdvice, type HeldColumns } from "./in-flight-slots.js";
import { ModelCallLedger } from "./model-call-ledger.js";
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
  StoredSecret,
  TokenRecord,
  UsageTotals,
} from "./proxy-store.js";
import { interruptedRecords, tokenUse, type TokenUseAnswer } from "./proxy-store.js";
import {
  ATTEMPT_COLUMNS,
  CALL_COLUMNS,
  insertMetering,
  proxyQueries,
  revokeMatching,
  REVOKE_PARAMETERS,
  upsertSecret,
  UPSERT_SECRET_PARAMETERS,
  TOKEN_COLUMNS,
} from "./store-queries.js";
import { migrateSqlite } from "./store-migrations.js";
import {
  attemptFromRow,
  callFromRow,
  meteringValues,
  PENDING_COLUMNS,
  pendingFromRow,
  pendingValues,
  secretFromRow,
  SQLITE_ENCODING,
  tokenFromRow,
  usageFromRows,
  type MeteringRow,
  type PendingRow,
  type SecretRow,
  type TokenRow,
  type UsageRow,
} from "./store-rows.js";
import { COMPILERS, compiled, namedValues, param } from "./store-sql.js";

const QUERIES = proxyQueries("sqlite");
const db = COMPILERS.sqlite;
// A call in flight here is owned by this process (a later start reconciles another's): SQLite's own.
const BEGIN_CALL_COLUMNS = [...PENDING_COLUMNS, "owner"];
const BEGIN_CALL = compiled(
  db
    .insertInto("pending_calls")
    .values(namedValues(BEGIN_CALL_COLUMNS))
    .onConflict((oc) =>
      oc.column("operation_id").doUpdateSet((eb) => ({
        attempt: eb.ref("excluded.attempt"),
        attempt_started_at: eb.ref("excluded.attempt_started_at"),
      })),
    ),
  BEGIN_CALL_COLUMNS,
);
const END_CALL = compiled(db.deleteFrom("pending_calls").where("operation_id", "=", param("operation_id")), [
  "operation_id",
]);
const ORPHANED_CALLS = compiled(db.deleteFrom("pending_calls").where("owner", "<>", param("owner")).returningAll(), [
  "owner",
]);
/** Values of each kind of row in a slot, as the statement that writes it takes them (a first use: time, hash). */
const HELD_COLUMNS: HeldColumns = {
  token: TOKEN_COLUMNS.length,
  use: 2,
  attempt: ATTEMPT_COLUMNS.length,
  call: CALL_COLUMNS.length,
};
/** A token a dead process had in a slot: perhaps committed already. */
const PUT_TOKEN_IF_NEW = compiled(
  db
    .insertInto("session_tokens")
    .values(namedValues(TOKEN_COLUMNS))
    .onConflict((oc) => oc.doNothing()),
  TOKEN_COLUMNS,
);
/** A record of a call that was interrupted, unless the call's own record is there already. */
const INSERT_IF_NEW = (table: "attempts" | "calls", columns: readonly string[]): string =>
  compiled(
    insertMetering(db, table, [namedValues(columns)]).onConflict((oc) => oc.doNothing()),
    columns,
  );

export interface SqliteProxyStoreOptions {
  /** A directory (the file is `llm-proxy.sqlite` in it), or `:memory:`. */
  dataDir: string;
  /**
   * A commit that failed in the background. Rows not in slots are lost (their writers saw the
   * error); rows in slots wait for the next commit. Default: thrown, as an uncaught error.
   */
  onWriteError?: (error: unknown) => void;
  /**
   * Default true: the data directory is held for this store (`@oz0/sqlite`'s
   * lockDataDirectory), and a second store on it, in this process or another,
   * fails to open. false only where one process plays a dead proxy and a live
   * one on the same directory (the ProxyStore contract tests).
   */
  exclusive?: boolean;
}

/**
 * How long rows in slots wait for others before they are committed together. They are
 * durable in their slots already and every read commits what waits first, so the wait
 * only bounds how many slots they hold: a job's token, its first use and its calls'
 * records meet its revocation's commit instead of each taking a commit of its own 5 ms
 * later (4.4 transactions a job in bench/control-plane-cost.ts, where the revocation's
 * is the one left; issue 24).
 */
const SLOTTED_COMMIT_MS = 1_000;
/** Rows in slots that are committed at the next turn rather than waiting longer: the slot file keeps its first 64 slots. */
const SLOTTED_ROWS_MAX = 48;

/** The writes of one turn of the event loop, committed together. */
interface WriteBatch {
  writes: (() => void)[];
  /** The writes whose rows are in slots: kept for the next commit when this one fails. */
  slotted: Set<() => void>;
  /** Slots of records in this batch (InFlightSlots.hold), freed once it is committed. */
  held: number[];
  /** Calls whose slot in flight is freed once it is committed. */
  ended: string[];
  /**
   * A row of `calls`, or a token spending from another session's budget, is among the writes:
   * only those change what a count's or an account's starting point reads (`#charged`,
   * `#callsOnRecord`), which commit what waits first only then.
   */
  charges: boolean;
  /** Settles once the batch is committed (or failed). */
  committed: PromiseWithResolvers<void>;
}

export class SqliteProxyStore implements ProxyStore {
  /** One process: budgets are held in its memory, and no other process changes the file. */
  readonly shared = false;
  readonly #db: Database.Database;
  readonly #statements;
  readonly #ledger: BudgetLedger;
  readonly #modelCalls: ModelCallLedger;
  // Writes go in one transaction per turn of the event loop (group commit): a
  // commit at a time costs more than the rest of a call. Each write resolves
  // once its batch is committed: a call in flight is in the file before its
  // attempt goes out, and a call's record before its answer ends, so a proxy
  // killed after a client has its answer still has the call on record. Every
  // read flushes first.
  #batch: WriteBatch | undefined;
  /** The next turn flushes the batch (setImmediate). */
  #flushScheduled = false;
  /** The batch holds only rows in slots: flushed SLOTTED_COMMIT_MS after the first. */
  #flushTimer: NodeJS.Timeout | undefined;
  // Calls between their first row in flight and their record. A write of a call alone
  // commits in its own turn instead of waiting for the next one: no other call can
  // add to its batch, and the wait was the proxy's added latency one call at a time.
  // While calls overlap they group. A call whose record never came only keeps grouping on.
  readonly #inFlight = new Set<string>();
  readonly #onWriteError: (error: unknown) => void;
  /** This store's pending calls carry it; those of any other (a process that died) are reconciled. */
  readonly #owner = randomUUID();
  readonly #checkpointer: SqliteCheckpointer | undefined;
  /** Where calls in flight are written (none for `:memory:`, whose rows die with the process anyway). */
  readonly #slots: InFlightSlots | undefined;
  readonly #slotsDir: string | undefined;
  /** The data directory held for this process (none for `:memory:`). */
  readonly #lock: DataDirectoryLock | undefined;
  /** Tokens held in slots, not committed yet, by hash. */
  readonly #tokensWaiting = new Map<string, TokenRow>();
  /** First uses of tokens held in slots, not committed yet: hash → time. */
  readonly #usesWaiting = new Map<string, number>();
  /** Calls in flight written to `pending_calls` instead (no slot file, or a row too big for a slot). */
  readonly #pendingInTable = new Set<string>();

  constructor(options: SqliteProxyStoreOptions) {
    let file = ":memory:";
    if (options.dataDir !== ":memory:") {
      // Before anything there is read: a start takes every slot file but its own for a dead process's.
      this.#lock =
        options.exclusive === false ? undefined : lockDataDirectory({ dir: options.dataDir, name: "llm-proxy" });
      file = path.join(options.dataDir, "llm-proxy.sqlite");
    }
    // Closed, newest first, should the constructor fail: no thread or handle is left on the directory.
    const opened: (() => unknown)[] = [];
    try {
      this.#onWriteError =
        options.onWriteError ??
        ((error) => {
          throw error;
        });
      this.#db = new Database(file);
      const handle = this.#db;
      opened.push(() => handle.close());
      this.#db.pragma("journal_mode = WAL");
      // Metering rows lost in a power cut are acceptable; a slow fsync per call is not.
      this.#db.pragma("synchronous = NORMAL");
      if (file !== ":memory:") {
        // Checkpoints (and their fsync) happen on a thread of their own, never in a commit here.
        this.#db.pragma("wal_autocheckpoint = 0");
        // The thread looks once a second, not every 250 ms: it polls even when nothing was written, and
        // four wake-ups a second were half an idle proxy's CPU (0.8 of 1.6 ms a second). It checkpoints
        // as often as before at a few commits a second (once a second after any came), and at most once
        // a second under load instead of four times: larger checkpoints, fewer of their fsyncs.
        const checkpointer = new SqliteCheckpointer({ file, intervalMs: 1_000, onError: this.#onWriteError });
        this.#checkpointer = checkpointer;
        opened.push(() => checkpointer.close());
      }
      migrateSqlite(this.#db);
      if (file !== ":memory:") {
        this.#slotsDir = path.join(options.dataDir, "in-flight");
        const slots = new InFlightSlots({ dir: this.#slotsDir, owner: this.#owner });
        this.#slots = slots;
        opened.push(() => slots.close());
      }
      // Each statement is compiled once, here: a call runs prepared statements only (issue 24).
      const prepare = (text: string): Database.Statement => this.#db.prepare(text);
      this.#statements = {
        getSecret: prepare(QUERIES.getSecret),
        upsertSecret: prepare(compiled(upsertSecret(db), UPSERT_SECRET_PARAMETERS)),
        deleteSecret: prepare(compiled(db.deleteFrom("secrets").where("name", "=", param("name")), ["name"])),
        listSecrets: prepare(QUERIES.listSecrets),
        putToken: prepare(QUERIES.putToken),
        putTokenIfNew: prepare(PUT_TOKEN_IF_NEW),
        findToken: prepare(QUERIES.findToken),
        useToken: prepare(QUERIES.useToken),
        revokeTokens: prepare(compiled(revokeMatching(db), REVOKE_PARAMETERS)),
        tokenUse: prepare(QUERIES.tokenUse),
        // Positional parameters: binding twenty named ones per row costs more than the insert.
        insertAttempt: prepare(QUERIES.insertAttempt),
        insertCall: prepare(QUERIES.insertCall),
        listAttempts: prepare(QUERIES.listAttempts),
        listCalls: prepare(QUERIES.listCalls),
        usageByAgent: prepare(QUERIES.usageByAgent),
        usageByAgentBetween: prepare(QUERIES.usageByAgentBetween),
        beginCall: prepare(BEGIN_CALL),
        endCall: prepare(END_CALL),
        orphanedCalls: prepare(ORPHANED_CALLS),
        insertAttemptIfNew: prepare(INSERT_IF_NEW("attempts", ATTEMPT_COLUMNS)),
        insertCallIfNew: prepare(INSERT_IF_NEW("calls", CALL_COLUMNS)),
        chargedToSession: prepare(QUERIES.chargedToSession),
        modelCallsOnRecord: prepare(QUERIES.modelCallsOnRecord),
      };
      // Synchronous starting point: a first reservation decides in the same turn as it asks.
      this.#ledger = new BudgetLedger({ spentBefore: (session) => this.#charged(session) });
      // The same for counts of model calls: the check and the count in the turn the call asks.
      this.#modelCalls = new ModelCallLedger({ madeBefore: (session) => this.#callsOnRecord(session) });
    } catch (error) {
      for (const close of opened.reverse()) close();
      this.#lock?.release();
      throw error;
    }
  }

  async putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }> {
    const replaced = this.#statements.getSecret.get(secret.name) !== undefined;
    const time = now.getTime();
    this.#statements.upsertSecret.run(secret.name, secret.iv, secret.ciphertext, secret.tag, time, time);
    this.#checkpointer?.wrote();
    return { replaced };
  }

  async getSecret(name: string): Promise<StoredSecret | undefined> {
    const row = this.#statements.getSecret.get(name) as SecretRow | undefined;
    return row ? secretFromRow(row) : undefined;
  }

  async deleteSecret(name: string): Promise<boolean> {
    const deleted = this.#statements.deleteSecret.run(name).changes > 0;
    this.#checkpointer?.wrote();
    return deleted;
  }

  async listSecrets(): Promise<SecretInfo[]> {
    const rows = this.#statements.listSecrets.all() as { name: string; created_at: number; updated_at: number }[];
    return rows.map((r) => ({ name: r.name, createdAt: new Date(r.created_at), updatedAt: new Date(r.updated_at) }));
  }

  async putToken(token: TokenRecord): Promise<void> {
    const values = [
      token.hash,
      token.job,
      token.agent,
      token.session,
      token.budgetUsd,
      token.createdAt.getTime(),
      token.budgetSession ?? null,
      token.traceparent ?? null,
      token.maxModelCalls || null,
    ];
    // In its slot it survives the process being killed before the token is handed out;
    // committed with the next group (a hash met twice would be a collision of 256 random bits).
    const slot = this.#slots?.hold("token", values);
    if (slot === undefined) {
      this.#statements.putToken.run(values);
      this.#checkpointer?.wrote();
      return;
    }
    this.#tokensWaiting.set(token.hash, {
      hash: token.hash,
      job: token.job,
      agent: token.agent,
      session: token.session,
      budget_usd: token.budgetUsd,
      budget_session: token.budgetSession ?? null,
      traceparent: token.traceparent ?? null,
      max_model_calls: token.maxModelCalls || null,
      created_at: token.createdAt.getTime(),
      revoked_at: null,
      used_at: null,
    });
    this.#enqueueSlotted(
      () => void this.#statements.putTokenIfNew.run(values),
      slot,
      undefined,
      token.budgetSession !== undefined,
    );
  }

  async findToken(hash: string): Promise<TokenRecord | undefined> {
    return this.#token(hash);
  }

  /** The token's row as it stands with what waits in slots (a token minted or first used a moment ago). */
  #token(hash: string): TokenRecord | undefined {
    // One waiting is not in the table (every commit clears what waited), so the table is not read for it:
    // a session's first model call finds its token here, minted a moment ago.
    const row = this.#tokensWaiting.get(hash) ?? (this.#statements.findToken.get(hash) as TokenRow | undefined);
    if (!row) return undefined;
    const usedAt = row.used_at === null ? this.#usesWaiting.get(hash) : undefined;
    return tokenFromRow(usedAt === undefined ? row : { ...row, used_at: usedAt });
  }

  async useToken(hash: string, now: Date): Promise<TokenRecord | undefined> {
    if (!this.#slots) {
      const row = this.#statements.useToken.get(now.getTime(), hash) as TokenRow | undefined;
      return row ? tokenFromRow(row) : undefined;
    }
    // Everything here runs in one turn of the event loop and a revocation commits what waits
    // before it reads: a use either comes before a revocation, which reports it, or is refused.
    const token = this.#token(hash);
    if (!token || token.revokedAt) return undefined;
    if (token.usedAt) return token;
    // The first use: in its slot before the call goes upstream, committed with the next group.
    const time = now.getTime();
    const slot = this.#slots.hold("use", [time, hash]);
    if (slot === undefined) {
      const row = this.#statements.useToken.get(time, hash) as TokenRow | undefined;
      this.#checkpointer?.wrote();
      return row ? tokenFromRow(row) : undefined;
    }
    this.#usesWaiting.set(hash, time);
    this.#enqueueSlotted(() => void this.#statements.useToken.get(time, hash), slot);
    token.usedAt = now;
    return token;
  }

  async revokeTokens(
    by: { hash?: string; session?: string },
    now: Date,
  ): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    const hash = by.hash ?? null;
    const session = by.session ?? null;
    // What waits (a first use among it) commits in the same transaction, before the revocation reads.
    return this.#commit(() => {
      const ended = this.#statements.revokeTokens.all(now.getTime(), hash, session) as TokenRow[];
      const counts = this.#statements.tokenUse.get(hash, session) as { matched: number; used: number };
      return { ended: ended.map(tokenFromRow), use: tokenUse(counts) };
    });
  }

  recordAttempt(attempt: AttemptRecord): Promise<void> {
    const values = [...meteringValues(attempt, SQLITE_ENCODING), attempt.attempt];
    const write = (): void => void this.#statements.insertAttempt.run(values);
    // Its call alone in flight: a slot; else the turn's group commit.
    const slot = this.#inFlight.size <= 1 ? this.#slots?.hold("attempt", values) : undefined;
    if (slot === undefined) return this.#enqueue(write);
    // In its slot, it survives the process being killed: committed with the next group.
    this.#enqueueSlotted(write, slot);
    return RESOLVED;
  }

  recordCall(call: CallRecord): Promise<void> {
    const values = [...meteringValues(call, SQLITE_ENCODING), call.attempts];
    const { operationId } = call;
    this.#inFlight.delete(operationId);
    const inTable = this.#pendingInTable.delete(operationId);
    const write = (): void => {
      this.#statements.insertCall.run(values);
      if (inTable) this.#statements.endCall.run(operationId);
    };
    const slot = inTable || this.#inFlight.size > 0 ? undefined : this.#slots?.hold("call", values);
    // The call's record and the end of its pending row commit in one transaction (the batch's),
    // with its attempts' records queued before it.
    if (slot === undefined) {
      const committed = this.#enqueue(write, this.#inFlight.size === 0, true);
      const slots = this.#slots;
      return inTable || !slots ? committed : committed.then(() => slots.end(operationId));
    }
    // Its record is in a slot (it survives the process being killed): the answer may end now.
    // The slot of the call in flight is freed with the record's, once the record is committed.
    this.#enqueueSlotted(write, slot, operationId, true);
    return RESOLVED;
  }

  beginAttempt(pending: PendingAttempt): Promise<void> {
    const { operationId } = pending;
    this.#inFlight.add(operationId);
    // It must be in a file before the attempt goes out. Alone, a slot is written at once (one
    // `pwrite`, in the page cache: it survives the process being killed, not a power cut,
    // like every commit here with synchronous = NORMAL); a retry keeps to its first way.
    const slots = this.#slots;
    if (slots && (slots.holds(operationId) || (this.#inFlight.size === 1 && !this.#pendingInTable.has(operationId))))
      if (slots.begin(pending)) return RESOLVED;
    // Else a row of pending_calls, resolved once its batch commits (grouped while calls overlap).
    this.#pendingInTable.add(operationId);
    const values = [...pendingValues(pending, SQLITE_ENCODING), this.#owner];
    return this.#enqueue(() => this.#statements.beginCall.run(values), this.#inFlight.size === 1);
  }

  async reconcileInterrupted(): Promise<CallRecord[]> {
    this.flush();
    // Budget holds of SQLite live in the memory of the process that made them: the dead
    // process's are gone with it, and an account opened now starts from the calls' charges.
    const orphaned = this.#slotsDir
      ? InFlightSlots.orphaned({ dir: this.#slotsDir, owner: this.#owner, columns: HELD_COLUMNS })
      : undefined;
    // The row being replayed, to name its slot file if SQLite refuses it (the whole replay rolls back).
    let replaying: object | undefined;
    const replay = this.#db.transaction(() => {
      // Rows a dead process had in slots and may not have committed: committed now, once.
      const held = orphaned?.held;
      const each = (rows: unknown[][] | undefined, statement: Database.Statement, get = false): void => {
        for (const values of rows ?? []) {
          replaying = values;
          if (get) statement.get(values);
          else statement.run(values);
        }
      };
      each(held?.token, this.#statements.putTokenIfNew);
      each(held?.use, this.#statements.useToken, true);
      each(held?.attempt, this.#statements.insertAttemptIfNew);
      each(held?.call, this.#statements.insertCallIfNew);
      const rows = this.#statements.orphanedCalls.all(this.#owner) as PendingRow[];
      const calls = [...rows.map(pendingFromRow), ...(orphaned?.inFlight ?? [])];
      const reconciled: CallRecord[] = [];
      for (const pending of calls) {
        replaying = pending;
        const { call, attempt } = interruptedRecords(pending);
        // A call with a record completed (its attempts' records came before it): a slot
        // freed after it, or the slot of a retry's previous attempt, is skipped here.
        if (
          this.#statements.insertCallIfNew.run([...meteringValues(call, SQLITE_ENCODING), call.attempts]).changes === 0
        )
          continue;
        this.#statements.insertAttemptIfNew.run([...meteringValues(attempt, SQLITE_ENCODING), attempt.attempt]);
        reconciled.push(call);
      }
      return reconciled;
    });
    let made: CallRecord[];
    try {
      made = replay();
      this.#checkpointer?.wrote();
    } catch (error) {
      const file = replaying && orphaned?.fileOf(replaying);
      if (!file) throw error;
      throw new Error(
        `could not replay the slot file ${file} (${(error as Error).message}); nothing of it was committed: ${slotFileAdvice(file)}`,
        { cause: error },
      );
    }
    // Committed: the dead processes' slot files are no longer their calls' only trace.
    // (A process killed between the commit and this removal finds the same rows next time: all skipped.)
    orphaned?.remove();
    return made;
  }

  /**
   * A write whose row is in a slot already: nothing waits for its commit, so it
   * waits for others (SLOTTED_COMMIT_MS, or until SLOTTED_ROWS_MAX wait). Its
   * slot (and the call's slot in flight, `ended`) is freed once it is committed.
   */
  #enqueueSlotted(write: () => void, slot: number, ended?: string, charges = false): void {
    const batch = this.#openBatch();
    batch.writes.push(write);
    if (charges) batch.charges = true;
    batch.slotted.add(write);
    batch.held.push(slot);
    if (ended !== undefined) batch.ended.push(ended);
    if (batch.held.length >= SLOTTED_ROWS_MAX) {
      if (!this.#flushScheduled) {
        this.#flushScheduled = true;
        setImmediate(this.#flushQueuedNow);
      }
    } else if (!this.#flushTimer) {
      this.#flushTimer = setTimeout(this.#flushQueuedNow, SLOTTED_COMMIT_MS);
      // Nothing is lost if the process ends first: the rows are in their slots (close() commits them).
      this.#flushTimer.unref();
    }
  }

  #openBatch(): WriteBatch {
    let batch = this.#batch;
    if (!batch) {
      batch = { writes: [], slotted: new Set(), held: [], ended: [], charges: false, committed: deferred() };
      this.#batch = batch;
    }
    return batch;
  }

  /**
   * Resolves once the write's batch is committed: at once (with what is queued)
   * when `alone`, else at the next turn of the event loop. `charges`: it writes
   * a row of `calls` (WriteBatch.charges).
   */
  #enqueue(write: () => void, alone = false, charges = false): Promise<void> {
    const batch = this.#openBatch();
    if (charges) batch.charges = true;
    if (!alone && !this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(this.#flushQueuedNow);
    }
    batch.writes.push(write);
    if (alone) {
      try {
        this.flush();
      } catch (error) {
        // The writers see it through the batch's promise; onWriteError where a turn's batch has it.
        setImmediate(() => this.#onWriteError(error));
      }
    }
    return batch.committed.promise;
  }

  readonly #flushQueuedNow = (): void => {
    try {
      this.flush();
    } catch (error) {
      this.#onWriteError(error);
    }
  };

  /** Writes what is queued now, in one transaction. */
  flush(): void {
    if (this.#batch) this.#commit(() => undefined);
  }

  /**
   * Before a read of `calls` (and of which sessions spend from a budget): commits what is
   * queued when it holds such rows. A token and its first use, which is all a session's
   * first model call finds waiting, stay in their slots for the next commit: the read's
   * answer is the same, and the call no longer waits for a commit of its own (issue 24).
   */
  #flushCharges(): void {
    if (this.#batch?.charges) this.#commit(() => undefined);
  }

  /** Writes what is queued and then runs `then`, in one transaction; returns what `then` returns. */
  #commit<T>(then: () => T): T {
    this.#flushScheduled = false;
    if (this.#flushTimer) {
      clearTimeout(this.#flushTimer);
      this.#flushTimer = undefined;
    }
    const batch = this.#batch;
    if (!batch) {
      const result = this.#db.transaction(then)();
      this.#checkpointer?.wrote();
      return result;
    }
    this.#batch = undefined;
    let result: T;
    try {
      result = this.#db.transaction(() => {
        for (const write of batch.writes) write();
        return then();
      })();
    } catch (error) {
      // Writes not in slots fail (their writers see it). Rows in slots stay waiting, in order,
      // with their slots: reads and revocations still see them, and the next commit retries
      // them (nothing else has them in this process, and a later start only replays a dead one).
      batch.committed.reject(error);
      const kept = batch.writes.filter((write) => batch.slotted.has(write));
      if (kept.length > 0) this.#batch = { ...batch, writes: kept, committed: deferred() };
      throw new Error(
        `the SQLite store could not commit what waits (${(error as Error).message}): ${kept.length} row(s) in slots (${this.#slots?.file}) stay waiting and are retried with the next commit; nothing that must read after them is answered until then (free disk space, or restart the proxy to replay them)`,
        { cause: error },
      );
    }
    this.#checkpointer?.wrote();
    // Only now are the rows of slots in SQLite: a read need not look at what waited any more.
    this.#tokensWaiting.clear();
    this.#usesWaiting.clear();
    const slots = this.#slots;
    if (slots) {
      for (const slot of batch.held) slots.release(slot);
      for (const operationId of batch.ended) slots.end(operationId);
    }
    batch.committed.resolve();
    return result;
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

  async usageByAgentBetween(since: Date, until: Date): Promise<Map<string, UsageTotals>> {
    this.flush();
    return usageFromRows(this.#statements.usageByAgentBetween.all(since.getTime(), until.getTime()) as UsageRow[]);
  }

  async chargedToSession(session: string): Promise<number> {
    return this.#charged(session);
  }

  #charged(session: string): number {
    this.#flushCharges();
    return (this.#statements.chargedToSession.get(session, session) as { cost: number }).cost;
  }

  reserveBudget(input: ReserveInput): Promise<Reservation> {
    return this.#ledger.reserve(input);
  }

  async countModelCall(input: { session: string; limit: number }): Promise<CountedCall> {
    return this.#modelCalls.count(input);
  }

  async forgetModelCalls(session: string): Promise<void> {
    this.#modelCalls.forget(session);
  }

  /** A session's calls on record that were sent (what waits in slots committed first). */
  #callsOnRecord(session: string): number {
    this.#flushCharges();
    return (this.#statements.modelCallsOnRecord.get(session) as { made: number }).made;
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
    try {
      this.flush();
    } finally {
      // Rows a failed commit left in slots keep the file: the next start replays them.
      await this.#checkpointer?.close();
      this.#db.close();
      this.#slots?.close();
      this.#lock?.release();
    }
  }
}

const RESOLVED = Promise.resolve();

function deferred(): WriteBatch["committed"] {
  const committed = Promise.withResolvers<void>();
  // Its writers see a failure; the uncaught one is for onWriteError.
  committed.promise.catch(() => undefined);
  return committed;
}
