// A guard's checks (session-memory-guard.ts, session-open-files-guard.ts,
// session-disk-guard.ts): every interval, one at a time, never throwing. A
// check may take longer than the interval (it reads on the guards' thread,
// guard-readings.ts, or runs du): the timer's next turn, or anyone asking
// meanwhile, shares the one under way rather than piling up behind it.

export class PeriodicCheck {
  readonly #check: () => Promise<void>;
  readonly #onError: (error: unknown) => void;
  readonly #timer: NodeJS.Timeout;
  /** The check under way, if any. */
  #running: Promise<void> | undefined;
  #closed = false;

  constructor(options: {
    /** Between checks. Default 1000 ms. */
    intervalMs?: number | undefined;
    check: () => Promise<void>;
    /** A check failed (not called once closed: the sandbox is stopping, and the guards' thread with it). */
    onError: (error: unknown) => void;
  }) {
    this.#check = options.check;
    this.#onError = options.onError;
    this.#timer = setInterval(() => void this.run(), options.intervalMs ?? 1000);
    this.#timer.unref();
  }

  /** A check now, or the one under way. */
  run(): Promise<void> {
    this.#running ??= this.#once().finally(() => (this.#running = undefined));
    return this.#running;
  }

  /** A check begun after this call: the one under way (begun, maybe, before what the caller waits to see) first. */
  async fresh(): Promise<void> {
    await this.#running;
    await this.run();
  }

  async #once(): Promise<void> {
    try {
      await this.#check();
    } catch (error) {
      if (!this.#closed) this.#onError(error);
    }
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
  }
}
