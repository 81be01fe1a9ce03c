// Whether the client of a model call went away, and what stops when it does
// (a stream upstream, a retry's pause). The part of an AbortSignal the proxy
// uses, without an AbortController's event-target plumbing, which cost more
// per call (an EventTarget, an Event, listener records) than the rest of a
// call's bookkeeping.

/** What a model call reads: `aborted`, and a listener for the moment it becomes true. */
export interface ClientGoneSignal {
  readonly aborted: boolean;
  addEventListener(type: "abort", listener: () => void): void;
  removeEventListener(type: "abort", listener: () => void): void;
}

export class ClientGone implements ClientGoneSignal {
  #aborted = false;
  /** Most calls never add one: made on the first. */
  #listeners: (() => void)[] | undefined;

  get aborted(): boolean {
    return this.#aborted;
  }

  /** The client left: every listener runs once, in the order added. */
  abort(): void {
    if (this.#aborted) return;
    this.#aborted = true;
    const listeners = this.#listeners;
    this.#listeners = undefined;
    for (const listener of listeners ?? []) listener();
  }

  addEventListener(_type: "abort", listener: () => void): void {
    if (this.#aborted) return;
    (this.#listeners ??= []).push(listener);
  }

  removeEventListener(_type: "abort", listener: () => void): void {
    const at = this.#listeners?.indexOf(listener) ?? -1;
    if (at >= 0) this.#listeners!.splice(at, 1);
  }
}
