// What the proxy keeps: encrypted secrets, session tokens (hashed), metering
// records and session budgets. SQLite (sqlite-proxy-store.ts) for one proxy,
// PostgreSQL (postgres-proxy-store.ts) for several replicas sharing it.

/** Token counts of one attempt or call, normalised across wire formats. */
export interface TokenUsage {
  /** Input tokens not read from or written to a cache. */
  input: number;
  /** Output tokens (OpenAI's completion_tokens, reasoning included). */
  output: number;
  cacheRead: number;
  cacheWrite: number;
  /** Reasoning tokens, a part of `output` (informational, not priced twice). */
  reasoning: number;
}

export const ZERO_USAGE: Readonly<TokenUsage> = Object.freeze({
  input: 0,
  output: 0,
  cacheRead: 0,
  cacheWrite: 0,
  reasoning: 0,
});

export interface StoredSecret {
  name: string;
  /** AES-256-GCM: 12-byte IV, ciphertext and 16-byte tag. */
  iv: Buffer;
  ciphertext: Buffer;
  tag: Buffer;
  createdAt: Date;
  updatedAt: Date;
}

export interface SecretInfo {
  name: string;
  createdAt: Date;
  updatedAt: Date;
}

/** What a revocation knows of its tokens' use (RevokeSessionTokenResponse.use). */
export type TokenUseAnswer = "never" | "used" | "unknown";

/** From the tokens a revocation matched and how many of them were used: unknown when none matched. */
export function tokenUse(counts: { matched: number; used: number }): TokenUseAnswer {
  return counts.matched === 0 ? "unknown" : counts.used > 0 ? "used" : "never";
}

export interface TokenRecord {
  /** SHA-256 of the token, hex; the token itself is never stored. */
  hash: string;
  job: string;
  agent: string;
  session: string;
  /** 0: no budget. */
  budgetUsd: number;
  /** The session whose budget account its calls spend from, when not its own (a harness operation's scratch session). */
  budgetSession?: string;
  /** The most model calls its session may make (its agent's limits.max_steps); 0: no limit. */
  maxModelCalls: number;
  /**
   * The W3C traceparent the token was minted in: the orchestrator's span of the session. Its calls' spans go in that
   * trace, whatever trace a harness names (tracing.ts).
   */
  traceparent?: string;
  createdAt: Date;
  revokedAt?: Date;
  /**
   * When a model call first carried it. A token never used proves its
   * session never reached a model, so the orchestrator may start that
   * session again elsewhere without running it twice.
   */
  usedAt?: Date;
}

/** How an attempt or a call ended. */
export type Outcome =
  | "ok"
  | "http_error"
  | "connection_error"
  | "stream_cut"
  | "budget_cut"
  | "budget_refused"
  /** Refused before it was sent: its session had made the most model calls its token allows. */
  | "model_calls_refused"
  | "client_aborted"
  | "proxy_error"
  /** The proxy died while the call was in flight: reconciled at a later start (tokens unknown, estimated). */
  | "interrupted";

/** Which call: its operation id, who made it, and where it went. */
export interface CallIdentity {
  operationId: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  /** The wire format's name (`anthropic`, `openai`, …): wire-formats/formats.ts. */
  wire: string;
  stream: boolean;
}

interface MeteringCommon extends CallIdentity {
  /** HTTP status (0 when no response came). */
  status: number;
  outcome: Outcome;
  usage: TokenUsage;
  costUsd: number;
  latencyMs: number;
  /** Time to the first byte of the answer; undefined when none came. */
  ttftMs?: number;
  /** True when a figure is an estimate (a cut stream, a model without a price). */
  estimated: boolean;
  startedAt: Date;
}

/** One request sent upstream. */
export interface AttemptRecord extends MeteringCommon {
  attempt: number;
}

/** One client request: its retries, and what the caller was charged. */
export interface CallRecord extends MeteringCommon {
  attempts: number;
}

export interface UsageTotals {
  calls: number;
  failedCalls: number;
  attempts: number;
  usage: TokenUsage;
  costUsd: number;
  estimated: boolean;
  /** The providers the calls went to, by name (sorted), so a cost priced by a scripted provider's table shows as nominal. */
  providers: string[];
}

export interface BudgetSnapshot {
  limitUsd: number;
  spentUsd: number;
  reservedUsd: number;
}

export interface ReserveInput {
  session: string;
  /** The budget, used when the account is first seen. */
  limitUsd: number;
  /** The most the call can cost. */
  worstCaseUsd: number;
  /** The least the call can cost (its input): below this it is refused. */
  minimumUsd: number;
  /**
   * When true (streams, which can be cut off at the budget) a call may hold
   * less than its worst case, down to `minimumUsd`; otherwise the whole
   * worst case must fit.
   */
  partial: boolean;
}

/** A hold on part of a session's budget; settle it exactly once (a second settle does nothing). */
export interface Reservation {
  /** Names the hold in the store, so an interrupted call's record can free it. */
  readonly id: string;
  readonly session: string;
  /** Dollars held: the call may spend up to this much. */
  readonly amountUsd: number;
  /** Ends the hold, charging what the call cost. */
  settle(actualUsd: number): Promise<void>;
}

/**
 * What another process changed, so caches of it are dropped: a stored secret
 * (set or deleted), a revoked token, or `reset` when changes may have been
 * missed (every cached secret and token must be read again).
 */
export type StoreChange =
  { kind: "secret"; name: string } | { kind: "token_revoked"; hash: string } | { kind: "reset" };

export interface SecretStore {
  putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): Promise<{ replaced: boolean }>;
  getSecret(name: string): Promise<StoredSecret | undefined>;
  deleteSecret(name: string): Promise<boolean>;
  listSecrets(): Promise<SecretInfo[]>;
}

export interface TokenStore {
  putToken(token: TokenRecord): Promise<void>;
  findToken(hash: string): Promise<TokenRecord | undefined>;
  /**
   * A model call carries the token: its record, marked used (the first use's
   * time is kept). Undefined when the token is unknown or revoked, and the
   * call is refused. Atomic with revokeTokens: a use either comes before a
   * revocation, which then reports it, or is refused.
   */
  useToken(hash: string, now: Date): Promise<TokenRecord | undefined>;
  /**
   * Revokes by token hash or by session. `ended`: the tokens this call ended
   * (each token is ended by one caller only). `use`: whether any matching
   * token, ended now or before, ever carried a model call; `unknown` when no
   * token matched.
   */
  revokeTokens(
    by: { hash?: string; session?: string },
    now: Date,
  ): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }>;
}

/**
 * A call in flight, written before its first attempt goes upstream (and
 * updated before each retry), so a proxy that dies mid-call leaves a trace.
 * The call's record (recordCall) removes it in the same transaction.
 */
export interface PendingAttempt extends CallIdentity {
  /** The attempt about to be sent (1 for the first). */
  attempt: number;
  /** When the call started. */
  startedAt: Date;
  /** When this attempt started. */
  attemptStartedAt: Date;
  /** The budget hold the call belongs to, when it has one. */
  reservationId?: string;
}

/** The records of a call the proxy died in: tokens unknown (0, estimated), nothing charged. */
export function interruptedRecords(pending: PendingAttempt): { call: CallRecord; attempt: AttemptRecord } {
  const common = {
    operationId: pending.operationId,
    job: pending.job,
    agent: pending.agent,
    session: pending.session,
    provider: pending.provider,
    model: pending.model,
    wire: pending.wire,
    stream: pending.stream,
    status: 0,
    outcome: "interrupted" as const,
    usage: { ...ZERO_USAGE },
    costUsd: 0,
    // How long it ran is unknown too.
    latencyMs: 0,
    estimated: true,
  };
  return {
    call: { ...common, startedAt: pending.startedAt, attempts: pending.attempt },
    attempt: { ...common, startedAt: pending.attemptStartedAt, attempt: pending.attempt },
  };
}

export interface MeteringStore {
  /**
   * Records that an attempt is about to be sent; resolves once it is durable
   * (it survives this process being killed). The first attempt inserts the
   * call's pending row, a retry updates it.
   */
  beginAttempt(pending: PendingAttempt): Promise<void>;
  /**
   * Turns every call in flight whose owner is gone into a call record with
   * outcome \`interrupted\` (tokens unknown: 0, estimated), plus its attempt's
   * record, and frees its budget hold; returns the records made. Each call is
   * reconciled once however many processes reconcile at once, and never one
   * whose record was written. The owner is gone when it is another process
   * of a store one process uses (SQLite: reconcile at start-up), or, for a
   * shared store, when it stopped renewing (the same expiry as budget holds).
   */
  reconcileInterrupted(): Promise<CallRecord[]>;
  /**
   * Both resolve once every reader of the store (every replica) sees the
   * record, and reject when it could not be stored. Writes may be batched.
   * recordCall also ends the call's pending attempt (beginAttempt).
   * Both resolve once the record survives the proxy being killed, so a
   * record whose answer reached a client is kept: PostgreSQL once it is
   * committed; SQLite (one process, whose every read commits what waits)
   * once it is committed or, with a data directory, in its slot
   * (in-flight-slots.ts), committed up to a second later or by the next
   * start.
   */
  recordAttempt(attempt: AttemptRecord): Promise<void>;
  recordCall(call: CallRecord): Promise<void>;
  /** Every attempt of a job, oldest first (for audits and tests). */
  listAttempts(job: string): Promise<AttemptRecord[]>;
  listCalls(job: string): Promise<CallRecord[]>;
  /** Usage of a job per agent. */
  usageByAgent(job: string): Promise<Map<string, UsageTotals>>;
  /** Usage per agent of every job's calls that started in [since, until). */
  usageByAgentBetween(since: Date, until: Date): Promise<Map<string, UsageTotals>>;
  /** What a budget account's calls were charged so far: its own session's, and every session whose token spends from it. */
  chargedToSession(session: string): Promise<number>;
}

/**
 * Session budgets. A reservation holds a call's worst case before it is sent
 * and is settled with what it cost; however many calls (and, for a shared
 * store, however many replicas) reserve at once, holds and spend together
 * never pass the limit. An account first seen starts from `chargedToSession`.
 */
export interface BudgetStore {
  /** Holds budget for one call, or throws ProxyError `budget_exhausted`. */
  reserveBudget(input: ReserveInput): Promise<Reservation>;
  /**
   * Drops a session's account once its tokens are revoked, so accounts do not
   * pile up; a new token for the session starts again from what it was
   * charged. Returns whether it was dropped (a shared store keeps an account
   * while a call holds part of it).
   */
  forgetBudget(session: string): Promise<boolean>;
  /** Spent and held dollars of a session's account, when it has one. */
  budgetSnapshot(session: string): Promise<BudgetSnapshot | undefined>;
}

/** One model call counted against its session's limit; end it exactly once, when its record is written. */
export interface CountedCall {
  /** The call is over and on record (a store that counts in memory may now forget the session's count). */
  end(): void;
}

/**
 * How many model calls each session made, held to the limit its token
 * carries (its agent's limits.max_steps). A call is counted just before it
 * is sent upstream: the check and the count are one step, so however many
 * calls (and, for a shared store, however many replicas) count at once,
 * no more than the limit get through. A count first seen starts from the
 * session's calls the store has as sent (a call record with an attempt, or
 * a call in flight), so it survives a restart.
 */
export interface ModelCallStore {
  /** Counts one call of `session`, or throws ProxyError `model_calls_exhausted` when `limit` calls were made. */
  countModelCall(input: { session: string; limit: number }): Promise<CountedCall>;
  /**
   * Drops a session's count once its tokens are revoked, so counts do not
   * pile up; a new token for the session starts again from its calls on
   * record. A store that counts in memory keeps a count while a call it
   * counted is in flight (that call is not on record yet).
   */
  forgetModelCalls(session: string): Promise<void>;
}

/**
 * What the proxy keeps. Every method answers through a promise, so a store on
 * a network database (PostgreSQL, for several proxy replicas) fits as well as
 * SQLite in the process.
 */
export interface ProxyStore extends SecretStore, TokenStore, MeteringStore, BudgetStore, ModelCallStore {
  /**
   * True when several proxy processes may use this store at once (their
   * caches then follow `watch`, and they must share one key-encryption key).
   */
  readonly shared: boolean;
  /** Calls `listener` for changes other processes made (a store only this process uses never calls it). Returns the unsubscribe. */
  watch(listener: (change: StoreChange) => void): () => void;
  close(): Promise<void>;
}
