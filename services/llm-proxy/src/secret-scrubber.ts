// Removes a provider key, and any fragment of it long enough to matter, from
// text on its way out (provider error bodies echo key prefixes or suffixes).

/** Fragments this long or longer are scrubbed; shorter ones are too common to mean anything. */
const MIN_FRAGMENT = 8;
const REDACTED = "[redacted]";

/** Replace the key and every run of at least 8 of its characters found in `text`. */
export function scrubSecret(text: string, secret: string | undefined): string {
  return secret ? createScrubber(secret)(text) : text;
}

/**
 * A scrubber for one key, its fragments indexed once: an attempt builds one
 * and runs every streamed event through it (a key split across two deltas
 * still leaves fragments of 8 or more characters in at least one of them).
 */
export function createScrubber(secret: string | undefined): (text: string) => string {
  if (!secret || secret.length < MIN_FRAGMENT) return (text) => text;
  const windows = new Set<string>();
  for (let i = 0; i + MIN_FRAGMENT <= secret.length; i += 1) windows.add(secret.slice(i, i + MIN_FRAGMENT));
  return (text) => scrubWith(text, secret, windows);
}

function scrubWith(text: string, secret: string, windows: Set<string>): string {
  if (text.length < MIN_FRAGMENT) return text;
  let out = text.includes(secret) ? text.split(secret).join(REDACTED) : text;
  // Mark every character covered by a window of the key, then cut the marked runs out.
  const covered = new Uint8Array(out.length);
  let any = false;
  for (let i = 0; i + MIN_FRAGMENT <= out.length; i += 1) {
    if (windows.has(out.slice(i, i + MIN_FRAGMENT))) {
      covered.fill(1, i, i + MIN_FRAGMENT);
      any = true;
    }
  }
  if (!any) return out;
  let result = "";
  for (let i = 0; i < out.length; i += 1) {
    if (covered[i] === 1) {
      if (i === 0 || covered[i - 1] !== 1) result += REDACTED;
    } else result += out[i];
  }
  out = result;
  return out;
}
