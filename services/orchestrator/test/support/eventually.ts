/**
 * Polls until `check` returns a value: waits for a condition, never asserts
 * how fast it came. The two-minute guard only turns a condition that never
 * comes (a broken implementation, or a deadline a loaded machine let pass
 * before the test looked) into a failure that says what it waited for,
 * instead of a run that hangs; `timeoutMs` widens it for work that is long
 * by design.
 */
export async function eventually<T>(
  check: () => Promise<T | undefined>,
  what = "the condition",
  timeoutMs = 120_000,
): Promise<T> {
  const giveUp = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > giveUp) throw new Error(`${what} never came about within ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
