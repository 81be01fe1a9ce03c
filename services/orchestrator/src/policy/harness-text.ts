// Text a harness chose (a permission id, a call id, a tool name), in a message
// the orchestrator writes to its log and to a job's stored error. A harness
// line may be up to a megabyte, so a message that held such a value whole
// could be several; a long value is cut to its first characters, saying how
// long it was.

/** The first characters a long value keeps. */
const KEPT = 120;

/** `value`, or its first 120 characters and its length when it is longer. */
export function clippedHarnessText(value: string): string {
  return value.length <= KEPT ? value : `${value.slice(0, KEPT)}… (${value.length} characters)`;
}
