// A guard's checks (session-memory-guard.ts, session-open-files-guard.ts):
// every interval, one at a time, never throwing. A check reads on the guards'
// thread (guard-readings.ts) and may take longer than the interval: the next
// waits for it rather than piling up behind it.

export class PeriodicCheck {
  readonly #check: () => Promise<void>;
  readonly #onError: (error: unknown) => void;
  readonly #timer: NodeJS.Timeout;
  #checking = false;
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

  /** One check now, unless one is running. */
  async run(): Promise<void> {
    if (this.#checking) return;
    this.#checking = true;
    try {
      await this.#check();
    } catch (error) {
      if (!this.#closed) this.#onError(error);
    } finally {
      this.#checking = false;
    }
  }

  close(): void {
    this.#closed = true;
    clearInterval(this.#timer);
  }
}
