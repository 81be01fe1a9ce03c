// What the SQLite and PostgreSQL stores share: the metering columns in one
// order, a record's values in that order, and the mapping of rows back to
// records. The two drivers hand columns back in their own types (SQLite:
// integers for booleans and times; PostgreSQL: booleans, Dates, and bigints
// as strings), so each mapper reads both.
import type {
  AttemptRecord,
  CallRecord,
  Outcome,
  PendingAttempt,
  StoredSecret,
  TokenRecord,
  UsageTotals,
} from "./proxy-store.js";

/** The metering columns of `attempts` and `calls`, in the order meteringValues gives them. */
export const METERING_COLUMNS = [
  "operation_id",
  "job",
  "agent",
  "session",
  "provider",
  "model",
  "wire",
  "stream",
  "status",
  "outcome",
  "input_tokens",
  "output_tokens",
  "cache_read_tokens",
  "cache_write_tokens",
  "reasoning_tokens",
  "cost_usd",
  "latency_ms",
  "ttft_ms",
  "estimated",
  "started_at",
] as const;

export const METERING_COLUMN_LIST = METERING_COLUMNS.join(", ");

/** The columns of `pending_calls` both stores write, in the order pendingValues gives them. */
export const PENDING_COLUMNS = [
  "operation_id",
  "job",
  "agent",
  "session",
  "provider",
  "model",
  "wire",
  "stream",
  "attempt",
  "started_at",
  "attempt_started_at",
  "reservation_id",
] as const;

/** How a store's driver takes booleans and times. */
export interface ColumnEncoding {
  bool(value: boolean): unknown;
  time(value: Date): unknown;
}

/** SQLite: 0/1 and milliseconds since the epoch. */
export const SQLITE_ENCODING: ColumnEncoding = { bool: (value) => (value ? 1 : 0), time: (value) => value.getTime() };
/** PostgreSQL: booleans and Dates as they are. */
export const POSTGRES_ENCODING: ColumnEncoding = { bool: (value) => value, time: (value) => value };

/** A metering record's values in METERING_COLUMNS order. */
export function meteringValues(record: AttemptRecord | CallRecord, encode: ColumnEncoding): unknown[] {
  const { usage } = record;
  checkFigures(record);
  return [
    record.operationId,
    record.job,
    record.agent,
    record.session,
    record.provider,
    record.model,
    record.wire,
    encode.bool(record.stream),
    record.status,
    record.outcome,
    usage.input,
    usage.output,
    usage.cacheRead,
    usage.cacheWrite,
    usage.reasoning,
    record.costUsd,
    record.latencyMs,
    record.ttftMs ?? null,
    encode.bool(record.estimated),
    encode.time(record.startedAt),
  ];
}

/**
 * Refuses a record whose figures are not numbers before it is stored anywhere: a NaN written to a slot reads
 * back as null, which no commit could store (NOT NULL), and the group commit that kept retrying it would stop
 * every session's records, and the replay of a restart, with it. Refused, the one record is lost (and
 * logged by Metering); everything else is stored as before.
 */
function checkFigures(record: AttemptRecord | CallRecord): void {
  const { usage } = record;
  const figures: [string, number | undefined][] = [
    ["usage.input", usage.input],
    ["usage.output", usage.output],
    ["usage.cacheRead", usage.cacheRead],
    ["usage.cacheWrite", usage.cacheWrite],
    ["usage.reasoning", usage.reasoning],
    ["costUsd", record.costUsd],
    ["latencyMs", record.latencyMs],
    ["ttftMs", record.ttftMs ?? 0],
  ];
  for (const [name, value] of figures)
    if (!Number.isFinite(value))
      throw new Error(
        `the metering record of call ${record.operationId} has ${name} ${String(value)}, not a finite number; it is not stored`,
      );
}

/** A pending call's values in PENDING_COLUMNS order. */
export function pendingValues(pending: PendingAttempt, encode: ColumnEncoding): unknown[] {
  return [
    pending.operationId,
    pending.job,
    pending.agent,
    pending.session,
    pending.provider,
    pending.model,
    pending.wire,
    encode.bool(pending.stream),
    pending.attempt,
    encode.time(pending.startedAt),
    encode.time(pending.attemptStartedAt),
    pending.reservationId ?? null,
  ];
}

type Time = Date | number;
type Flag = boolean | number;
/** bigint columns arrive as strings from PostgreSQL; token counts stay far below 2^53. */
type Count = number | string;

const toDate = (value: Time): Date => (value instanceof Date ? value : new Date(value));
const toFlag = (value: Flag): boolean => value === true || value === 1;

export interface MeteringRow extends IdentityRow {
  status: number;
  outcome: string;
  input_tokens: Count;
  output_tokens: Count;
  cache_read_tokens: Count;
  cache_write_tokens: Count;
  reasoning_tokens: Count;
  cost_usd: number;
  latency_ms: number;
  ttft_ms: number | null;
  estimated: Flag;
  started_at: Time;
}

/** The columns that say which call a row is of, as both metering and pending rows have them. */
interface IdentityRow {
  operation_id: string;
  job: string;
  agent: string;
  session: string;
  provider: string;
  model: string;
  wire: string;
  stream: Flag;
}

function identityFromRow(
  row: IdentityRow,
): Pick<PendingAttempt, "operationId" | "job" | "agent" | "session" | "provider" | "model" | "wire" | "stream"> {
  return {
    operationId: row.operation_id,
    job: row.job,
    agent: row.agent,
    session: row.session,
    provider: row.provider,
    model: row.model,
    wire: row.wire,
    stream: toFlag(row.stream),
  };
}

export function meteringFromRow(row: MeteringRow): Omit<AttemptRecord, "attempt"> {
  return {
    ...identityFromRow(row),
    status: row.status,
    outcome: row.outcome as Outcome,
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
    estimated: toFlag(row.estimated),
    startedAt: toDate(row.started_at),
  };
}

export const attemptFromRow = (row: MeteringRow & { attempt: number }): AttemptRecord => ({
  ...meteringFromRow(row),
  attempt: row.attempt,
});
export const callFromRow = (row: MeteringRow & { attempts: number }): CallRecord => ({
  ...meteringFromRow(row),
  attempts: row.attempts,
});

export interface SecretRow {
  name: string;
  iv: Buffer;
  ciphertext: Buffer;
  tag: Buffer;
  created_at: Time;
  updated_at: Time;
}

export function secretFromRow(row: SecretRow): StoredSecret {
  return {
    name: row.name,
    iv: row.iv,
    ciphertext: row.ciphertext,
    tag: row.tag,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
  };
}

export interface TokenRow {
  hash: string;
  job: string;
  agent: string;
  session: string;
  budget_usd: number;
  budget_session: string | null;
  traceparent: string | null;
  /** Null on a token minted before tokens carried a limit: none. */
  max_model_calls: number | null;
  created_at: Time;
  revoked_at: Time | null;
  used_at: Time | null;
}

export function tokenFromRow(row: TokenRow): TokenRecord {
  return {
    hash: row.hash,
    job: row.job,
    agent: row.agent,
    session: row.session,
    budgetUsd: row.budget_usd,
    maxModelCalls: row.max_model_calls ?? 0,
    ...(row.budget_session === null ? {} : { budgetSession: row.budget_session }),
    ...(row.traceparent === null ? {} : { traceparent: row.traceparent }),
    createdAt: toDate(row.created_at),
    ...(row.revoked_at === null ? {} : { revokedAt: toDate(row.revoked_at) }),
    ...(row.used_at === null ? {} : { usedAt: toDate(row.used_at) }),
  };
}

export interface PendingRow extends IdentityRow {
  attempt: number;
  started_at: Time;
  attempt_started_at: Time;
  reservation_id: string | null;
}

export function pendingFromRow(row: PendingRow): PendingAttempt {
  return {
    ...identityFromRow(row),
    attempt: row.attempt,
    startedAt: toDate(row.started_at),
    attemptStartedAt: toDate(row.attempt_started_at),
    ...(row.reservation_id === null ? {} : { reservationId: row.reservation_id }),
  };
}

/**
 * One agent's usage: both stores ask `calls` the same question (store-queries.ts),
 * and read its answer here. Sums arrive as numbers (SQLite) or strings
 * (PostgreSQL's bigint sums).
 */
export interface UsageRow {
  agent: string;
  calls: Count;
  failed_calls: Count;
  attempts: Count;
  input: Count;
  output: Count;
  cache_read: Count;
  cache_write: Count;
  reasoning: Count;
  cost: number;
  estimated: Flag;
  /** The providers, sorted: SQLite says them as one comma-separated text (names never hold a comma). */
  providers: string[] | string | null;
}

export function usageFromRows(rows: UsageRow[]): Map<string, UsageTotals> {
  return new Map(
    rows.map((r) => [
      r.agent,
      {
        calls: Number(r.calls),
        failedCalls: Number(r.failed_calls),
        attempts: Number(r.attempts),
        usage: {
          input: Number(r.input),
          output: Number(r.output),
          cacheRead: Number(r.cache_read),
          cacheWrite: Number(r.cache_write),
          reasoning: Number(r.reasoning),
        },
        costUsd: Number(r.cost),
        estimated: toFlag(r.estimated),
        providers:
          r.providers === null ? [] : typeof r.providers === "string" ? r.providers.split(",").sort() : r.providers,
      },
    ]),
  );
}
