// A failed conformance check. Its own module so that the scenario runner and
// the checks it ends every scenario with can both use it without importing
// each other.

/** A conformance check that did not hold; its message says what the harness did wrong. */
export class ConformanceFailure extends Error {
  override name = "ConformanceFailure";
}

/** Fails with `message` unless `condition` holds. */
export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ConformanceFailure(message);
}
