// What the proxy keeps: encrypted secrets, session tokens (hashed) and
// metering records. An interface so PostgreSQL can replace SQLite (issue 13).

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

export const ZERO_USAGE: Readonly<TokenUsage> = Object.freeze({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 });

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

export interface TokenRecord {
  /** SHA-256 of the token, hex; the token itself is never stored. */
  hash: string;
  job: string;
  agent: string;
  session: string;
  /** 0: no budget. */
  budgetUsd: number;
  createdAt: Date;
  revokedAt?: Date;
}

/** How an attempt or a call ended. */
export type Outcome =
  | "ok"
  | "http_error"
  | "connection_error"
  | "stream_cut"
  | "budget_cut"
  | "budget_refused"
  | "client_aborted"
  | "proxy_error";

interface MeteringCommon {
  operationId: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: "anthropic" | "openai";
  stream: boolean;
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
}

export interface ProxyStore {
  putSecret(secret: Omit<StoredSecret, "createdAt" | "updatedAt">, now: Date): { replaced: boolean };
  getSecret(name: string): StoredSecret | undefined;
  deleteSecret(name: string): boolean;
  listSecrets(): SecretInfo[];

  putToken(token: TokenRecord): void;
  findToken(hash: string): TokenRecord | undefined;
  /** Revokes by token hash or by session; returns how many tokens it ended. */
  revokeTokens(by: { hash?: string; session?: string }, now: Date): TokenRecord[];

  recordAttempt(attempt: AttemptRecord): void;
  recordCall(call: CallRecord): void;
  /** Every attempt of a job, oldest first (for audits and tests). */
  listAttempts(job: string): AttemptRecord[];
  listCalls(job: string): CallRecord[];
  /** Usage of a job per agent. */
  usageByAgent(job: string): Map<string, UsageTotals>;
  /** What a session's calls were charged so far (the budget ledger's starting point). */
  chargedToSession(session: string): number;

  close(): void;
}
