// A suffix automaton of one secret: it recognises every substring of the
// secret, so reading a text one character at a time tells, at each
// character, the length of the longest run of the secret's characters that
// ends there. That one number is what the scrubber needs twice: runs of 8 or
// more are scrubbed, and the run at the end of a streamed text so far is what
// must be held back until the next delta says whether it grows into one.
// Linear in the secret to build, constant time (amortised) per character read;
// transitions are one flat table over the secret's own alphabet, so reading
// a character is an array lookup (every streamed event goes through it).

/**
 * Where a reading stands: a state of the automaton and the length of the run
 * that ends at the last character read. Mutable, one per reading, so reading
 * a character allocates nothing.
 */
export interface KeyMatch {
  state: number;
  length: number;
}

export class KeyAutomaton {
  /** The secret's alphabet: a character's column in `#next`, or -1. */
  readonly #ascii = new Int16Array(128).fill(-1);
  readonly #other = new Map<number, number>();
  readonly #width: number;
  /** `#next[state * width + column]`: the target state plus one; 0 for none. */
  readonly #next: Int32Array;
  readonly #link: Int32Array;
  readonly #maxLength: Int32Array;
  #states = 1;

  /** `secret` as UTF-16 code units, the unit the scrubber reads text in. */
  constructor(secret: string) {
    let width = 0;
    for (let i = 0; i < secret.length; i += 1) {
      const code = secret.charCodeAt(i);
      if (this.#column(code) >= 0) continue;
      if (code < 128) this.#ascii[code] = width;
      else this.#other.set(code, width);
      width += 1;
    }
    this.#width = width;
    // A suffix automaton of n characters has at most 2n - 1 states.
    const capacity = Math.max(2, 2 * secret.length);
    this.#next = new Int32Array(capacity * width);
    this.#link = new Int32Array(capacity).fill(-1);
    this.#maxLength = new Int32Array(capacity);
    let last = 0;
    for (let i = 0; i < secret.length; i += 1) {
      const column = this.#column(secret.charCodeAt(i));
      const current = this.#addState(this.#maxLength[last]! + 1);
      let p = last;
      while (p !== -1 && this.#next[p * width + column] === 0) {
        this.#next[p * width + column] = current + 1;
        p = this.#link[p]!;
      }
      if (p === -1) {
        this.#link[current] = 0;
      } else {
        const q = this.#next[p * width + column]! - 1;
        if (this.#maxLength[p]! + 1 === this.#maxLength[q]) {
          this.#link[current] = q;
        } else {
          const clone = this.#addState(this.#maxLength[p]! + 1);
          this.#next.copyWithin(clone * width, q * width, (q + 1) * width);
          this.#link[clone] = this.#link[q]!;
          while (p !== -1 && this.#next[p * width + column] === q + 1) {
            this.#next[p * width + column] = clone + 1;
            p = this.#link[p]!;
          }
          this.#link[q] = clone;
          this.#link[current] = clone;
        }
      }
      last = current;
    }
  }

  /** Reads one more character: `match.length` becomes the longest run of the secret ending at it. */
  step(match: KeyMatch, code: number): void {
    const column = this.#column(code);
    if (column < 0) {
      // Not a character of the secret: no run ends here.
      match.state = 0;
      match.length = 0;
      return;
    }
    const width = this.#width;
    let { state, length } = match;
    while (state !== 0 && this.#next[state * width + column] === 0) {
      state = this.#link[state]!;
      length = this.#maxLength[state]!;
    }
    const to = this.#next[state * width + column]!;
    match.state = to === 0 ? 0 : to - 1;
    match.length = to === 0 ? 0 : length + 1;
  }

  #column(code: number): number {
    return code < 128 ? this.#ascii[code]! : (this.#other.get(code) ?? -1);
  }

  #addState(maxLength: number): number {
    const state = this.#states;
    this.#states += 1;
    this.#maxLength[state] = maxLength;
    return state;
  }
}
