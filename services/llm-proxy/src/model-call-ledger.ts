// Each session's count of model calls, held to the limit its token carries
// (its agent's limits.max_steps), in memory, for a store one proxy process
// uses alone (SQLite). The check and the count are one synchronous step on
// the event loop, so concurrent calls cannot together pass the limit. A
// count first seen starts from the session's calls on record, so a restart
// goes on from where the last process stopped. (Several replicas need the
// counts in their shared store: PostgresProxyStore keeps them as locked rows.)
import { ProxyError } from "./proxy-error.js";
import type { CountedCall } from "./proxy-store.js";

/** The call past the limit: the harness may not make it, whatever it retries. */
export function modelCallsExhausted(o: { limit: number; made: number }): ProxyError {
  return new ProxyError(
    "model_calls_exhausted",
    `the session has made ${o.made} model calls, the most it may make (${o.limit}, its agent's limits.max_steps); the session must end (an operator raises it with the agent's limits.max_steps)`,
  );
}

interface Count {
  made: number;
  /** Calls counted and not yet on record. */
  inFlight: number;
  /** Its tokens were revoked: dropped once the calls in flight end. */
  forgotten: boolean;
}

export interface ModelCallLedgerOptions {
  /** How many calls of a session the store has as sent: a count's starting point when first seen. Synchronous. */
  madeBefore: (session: string) => number;
}

export class ModelCallLedger {
  readonly #counts = new Map<string, Count>();
  readonly #madeBefore: (session: string) => number;

  constructor(options: ModelCallLedgerOptions) {
    this.#madeBefore = options.madeBefore;
  }

  /** Counts one call of `session`, or throws `model_calls_exhausted` when `limit` calls were made. */
  count(input: { session: string; limit: number }): CountedCall {
    let count = this.#counts.get(input.session);
    if (!count) {
      count = { made: this.#madeBefore(input.session), inFlight: 0, forgotten: false };
      this.#counts.set(input.session, count);
    }
    // A new token for a session whose tokens were revoked while its calls were in flight: the count goes on.
    count.forgotten = false;
    if (count.made >= input.limit) throw modelCallsExhausted({ limit: input.limit, made: count.made });
    count.made += 1;
    count.inFlight += 1;
    const counted = count;
    let ended = false;
    return {
      end: () => {
        if (ended) return;
        ended = true;
        counted.inFlight -= 1;
        if (counted.forgotten && counted.inFlight === 0 && this.#counts.get(input.session) === counted)
          this.#counts.delete(input.session);
      },
    };
  }

  /**
   * Drops a session's count when its tokens are revoked, so the ledger does
   * not grow without end. A count with calls in flight is dropped once they
   * end: until they are on record, a count started again would miss them.
   */
  forget(session: string): void {
    const count = this.#counts.get(session);
    if (!count) return;
    if (count.inFlight === 0) this.#counts.delete(session);
    else count.forgotten = true;
  }
}
