// Removes a provider key, and any fragment of it long enough to matter, from
// text on its way out (provider error bodies echo key prefixes or suffixes,
// and a key split across two streamed deltas leaves a fragment in each).

/** Fragments this long or longer are scrubbed; shorter ones are too common to mean anything. */
const MIN_FRAGMENT = 8;
const REDACTED = "[redacted]";
const BASE = 257;
// BASE^(MIN_FRAGMENT-1) mod 2^32: what the outgoing character weighs in the rolling hash.
const TOP = Array.from({ length: MIN_FRAGMENT - 1 }).reduce<number>((acc) => Math.imul(acc, BASE) >>> 0, 1);

function hashAt(text: string, start: number): number {
  let h = 0;
  for (let i = start; i < start + MIN_FRAGMENT; i += 1) h = (Math.imul(h, BASE) + text.charCodeAt(i)) >>> 0;
  return h;
}

/** Replace the key and every run of at least 8 of its characters found in `text`. */
export function scrubSecret(text: string, secret: string | undefined): string {
  return createScrubber(secret)(text);
}

/**
 * A scrubber for one key, built per attempt. It scans text with a rolling
 * hash of 8-character windows (no allocation per position), so running every
 * streamed event and every answer through it costs little.
 */
export function createScrubber(secret: string | undefined): (text: string) => string {
  if (!secret || secret.length < MIN_FRAGMENT) return (text) => text;
  const windows = new Map<number, string[]>();
  for (let i = 0; i + MIN_FRAGMENT <= secret.length; i += 1) {
    const h = hashAt(secret, i);
    const list = windows.get(h);
    const fragment = secret.slice(i, i + MIN_FRAGMENT);
    if (list) list.push(fragment);
    else windows.set(h, [fragment]);
  }
  return (text) => scrubWith(text, windows);
}

function scrubWith(text: string, windows: Map<number, string[]>): string {
  if (text.length < MIN_FRAGMENT) return text;
  let covered: Uint8Array | undefined;
  let h = hashAt(text, 0);
  for (let i = 0; ; i += 1) {
    const candidates = windows.get(h);
    if (candidates && candidates.includes(text.slice(i, i + MIN_FRAGMENT))) {
      covered ??= new Uint8Array(text.length);
      covered.fill(1, i, i + MIN_FRAGMENT);
    }
    if (i + MIN_FRAGMENT >= text.length) break;
    h = (Math.imul((h - Math.imul(text.charCodeAt(i), TOP)) >>> 0, BASE) + text.charCodeAt(i + MIN_FRAGMENT)) >>> 0;
  }
  if (!covered) return text;
  let result = "";
  for (let i = 0; i < text.length; i += 1) {
    if (covered[i] === 1) {
      if (i === 0 || covered[i - 1] !== 1) result += REDACTED;
    } else result += text[i];
  }
  return result;
}
