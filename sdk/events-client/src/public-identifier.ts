// What the events service keeps of a name a session chose (a tool, a call id, a model): an identifier, no prose and
// no session token. The services that put such names elsewhere the public reads (trace spans, metrics) keep the
// same rule, so what one drops the others do not publish.

/** Identifiers: names, ids, codes, model names. No spaces, so no prose fits. */
const IDENTIFIER = /^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,127}$/;

/**
 * The LLM proxy's session tokens (`oz0st_` and base64url) fit an identifier and a path, and a session can read its
 * own from its environment: a value holding one is not published, so a name never carries a token that still
 * spends its job's budget.
 */
export function holdsSessionToken(value: string): boolean {
  return /oz0st_/i.test(value);
}

/** Whether `value` is an identifier: at most 128 characters of `[A-Za-z0-9_.:@+-]`, the first a letter or digit. */
export function isIdentifier(value: string): boolean {
  return IDENTIFIER.test(value);
}

/** `value` when it is an identifier holding no session token; else undefined. */
export function publicIdentifier(value: unknown): string | undefined {
  return typeof value === "string" && isIdentifier(value) && !holdsSessionToken(value) ? value : undefined;
}
