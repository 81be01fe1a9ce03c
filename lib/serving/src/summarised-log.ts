// Log lines that may come as often as a caller likes (a refused call, a
// call over a budget), kept to a few a minute: for each source (a caller, a
// session), the first after a quiet interval is logged at once, and the rest
// are counted, by what they were about, and summed up in at most one line an
// interval. A flood of requests is then not a flood of log lines, and the
// log still names who and how many. The sources and details counted apart
// are bounded (a caller chooses both), the rest counted together.

/** What came from one source since its last line, by detail (a method, a budget). */
export interface Counted<Kind extends string> {
  kind: Kind;
  details: Map<string, number>;
  /** How many in all. */
  total: number;
}

export interface SummarisedLogOptions<Kind extends string> {
  /** How long a summary's counting lasts, and the quiet that makes the next line come at once. Default 60 s. */
  intervalMs?: number;
  /** How many sources are counted apart; the rest together, as `otherSources`. Default 64. */
  sourcesNamed?: number;
  /** What the sources past `sourcesNamed` are counted as. Default `(other sources)`. */
  otherSources?: string;
  /** A source always counted apart, past `sourcesNamed` too. */
  alwaysApart?: string;
  /** How many details of a source are counted apart; the rest together, as `(other)`. Default 32. */
  detailsNamed?: number;
  /** Writes the summary of what a source sent since its last line. */
  summarise(source: string, counted: Counted<Kind>): void;
}

export class SummarisedLog<Kind extends string> {
  readonly #o: SummarisedLogOptions<Kind>;
  readonly #counting = new Map<string, { kind: Kind; details: Map<string, number> }>();
  #timer: NodeJS.Timeout | undefined;

  constructor(options: SummarisedLogOptions<Kind>) {
    this.#o = options;
  }

  /**
   * One more from `source`: `logAtOnce` runs when it is the first after a
   * quiet interval, else it is counted under `detail` for the next summary.
   */
  add(source: string, kind: Kind, detail: string, logAtOnce: () => void): void {
    const key =
      source === this.#o.alwaysApart || this.#counting.has(source) || this.#counting.size < (this.#o.sourcesNamed ?? 64)
        ? source
        : (this.#o.otherSources ?? "(other sources)");
    const counting = this.#counting.get(key);
    if (!counting) {
      logAtOnce();
      this.#counting.set(key, { kind, details: new Map() });
      this.#timer ??= this.#startTimer();
      return;
    }
    const named =
      counting.details.has(detail) || counting.details.size < (this.#o.detailsNamed ?? 32) ? detail : "(other)";
    counting.details.set(named, (counting.details.get(named) ?? 0) + 1);
  }

  /** Writes what was counted and not yet logged; the log is quiet again. */
  close(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    for (const [source, counting] of this.#counting) this.#summarise(source, counting);
    this.#counting.clear();
  }

  #startTimer(): NodeJS.Timeout {
    const timer = setTimeout(() => {
      // A source that goes on is summed up once an interval; one with a quiet interval is logged at once again.
      for (const [source, counting] of this.#counting) {
        if (this.#summarise(source, counting)) counting.details = new Map();
        else this.#counting.delete(source);
      }
      this.#timer = this.#counting.size > 0 ? this.#startTimer() : undefined;
    }, this.#o.intervalMs ?? 60_000);
    timer.unref();
    return timer;
  }

  /** Writes a source's counts, if any; whether there were some. */
  #summarise(source: string, counting: { kind: Kind; details: Map<string, number> }): boolean {
    if (counting.details.size === 0) return false;
    let total = 0;
    for (const count of counting.details.values()) total += count;
    this.#o.summarise(source, { kind: counting.kind, details: counting.details, total });
    return true;
  }
}
