// When and how long to wait before another attempt of a model call.

export interface RetryPolicy {
  /** Attempts of one call, the first included. Default 5. */
  maxAttempts: number;
  /** Backoff before the second attempt; doubles after each. Default 500 ms. */
  baseDelayMs: number;
  /** Longest backoff. Default 8 000 ms. */
  maxDelayMs: number;
  /** Longest wait a `retry-after` / `retry-after-ms` header can ask for. Default 20 000 ms. */
  maxRetryAfterMs: number;
  /**
   * How long one attempt may wait for the provider: for its whole answer, or
   * for a stream's headers (the stream then lasts as long as it generates).
   * Default 600 000 ms, as the provider SDKs' own timeout.
   */
  attemptTimeoutMs: number;
  /**
   * How long a stream that has begun may go without a byte from the provider
   * before it is cut (a stalled provider would otherwise hold the call, its
   * budget hold and a connection until the session ends). Default 600 000 ms:
   * Anthropic pings every few seconds, but a reasoning model on Chat
   * Completions may send nothing while it reasons.
   */
  streamIdleTimeoutMs: number;
}

export const DEFAULT_RETRY_POLICY: Readonly<RetryPolicy> = Object.freeze({
  maxAttempts: 5,
  baseDelayMs: 500,
  maxDelayMs: 8_000,
  maxRetryAfterMs: 20_000,
  attemptTimeoutMs: 600_000,
  streamIdleTimeoutMs: 600_000,
});

const RETRYABLE = new Set([408, 429, 500, 502, 503, 504, 529]);

export function isRetryableStatus(status: number): boolean {
  return RETRYABLE.has(status);
}

/**
 * Wait before attempt `nextAttempt` (2, 3, …): what the provider asked for
 * in `retry-after-ms` or `retry-after` (seconds or an HTTP date), capped;
 * otherwise exponential backoff with full jitter.
 */
export function retryDelayMs(options: {
  policy: RetryPolicy;
  nextAttempt: number;
  headers?: Record<string, string | string[] | undefined>;
  random?: () => number;
  now?: () => number;
}): number {
  const { policy, headers = {} } = options;
  const asked = askedDelayMs(headers, options.now ?? Date.now);
  if (asked !== undefined) return Math.min(Math.max(0, asked), policy.maxRetryAfterMs);
  const ceiling = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, options.nextAttempt - 2));
  return Math.round((options.random ?? Math.random)() * ceiling);
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function askedDelayMs(headers: Record<string, string | string[] | undefined>, now: () => number): number | undefined {
  const ms = header(headers, "retry-after-ms");
  if (ms !== undefined && ms.trim() !== "" && Number.isFinite(Number(ms))) return Number(ms);
  const after = header(headers, "retry-after");
  if (after === undefined || after.trim() === "") return undefined;
  if (Number.isFinite(Number(after))) return Number(after) * 1000;
  const date = Date.parse(after);
  return Number.isNaN(date) ? undefined : date - now();
}
