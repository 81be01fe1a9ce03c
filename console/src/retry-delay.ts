// How long a page waits before it asks the orchestrator again after a call
// failed (a stream broke, the orchestrator restarted, the network dropped):
// quick at first, then at most every 5 s.
const RETRY_MS = [250, 500, 1_000, 2_000, 5_000];

/** The wait before attempt `attempt` + 1 (0 after the first failure). */
export function retryDelayMs(attempt: number): number {
  return RETRY_MS[Math.min(attempt, RETRY_MS.length - 1)]!;
}

/** Resolves after {@link retryDelayMs} of `attempt`. */
export function waitBeforeRetry(attempt: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, retryDelayMs(attempt)));
}
