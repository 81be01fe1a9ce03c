// How a streaming handler, or a job's transcript follower, waits: for work a
// listener hands it, or for its call to end. A listener rings; the waiter
// waits only when it has nothing to do, and a ring that came first is not
// lost (`ready` is checked first).
export class Doorbell {
  #ring: (() => void) | undefined;
  readonly #signal: AbortSignal;
  readonly #onAbort = (): void => this.ring();

  constructor(signal: AbortSignal) {
    this.#signal = signal;
    signal.addEventListener("abort", this.#onAbort);
  }

  ring(): void {
    this.#ring?.();
  }

  /** Resolves at the next ring, or at once when `ready()` already holds or the call has ended. */
  async wait(ready: () => boolean): Promise<void> {
    await new Promise<void>((resolve) => {
      this.#ring = resolve;
      if (ready() || this.#signal.aborted) resolve();
    });
    this.#ring = undefined;
  }

  close(): void {
    this.#signal.removeEventListener("abort", this.#onAbort);
  }
}
