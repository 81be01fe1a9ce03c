// Which answer of overlapping reads of one list may be shown. Reads are
// numbered as they start; an answer is shown unless a read that started after
// it was shown already (an older answer never replaces a newer one). Waiting
// instead for the answer of the latest read started would show nothing while
// changes keep arriving faster than reads finish.
export class ReadOrder {
  #started = 0;
  #shown = 0;

  /** Numbers a read as it starts. */
  start(): number {
    return ++this.#started;
  }

  /** Whether read `n`'s answer may be shown; when it may, it counts as shown. */
  show(n: number): boolean {
    if (n <= this.#shown) return false;
    this.#shown = n;
    return true;
  }

  /** Whether read `n` is the latest started (only the latest schedules the next timed read). */
  isLatest(n: number): boolean {
    return n === this.#started;
  }
}
