// Session budgets. A call reserves its worst-case cost before it is sent and
// settles its actual cost after, all synchronously on the event loop, so
// concurrent calls cannot together spend more than the budget.
import { ProxyError } from "./proxy-error.js";

interface Account {
  limitUsd: number;
  spentUsd: number;
  reservedUsd: number;
}

/** A hold on part of a session's budget; settle it exactly once. */
export interface Reservation {
  readonly session: string;
  /** Dollars held: the call may spend up to this much. */
  readonly amountUsd: number;
  settle(actualUsd: number): void;
}

export interface ReserveInput {
  session: string;
  /** The budget, used when the account is first seen. */
  limitUsd: number;
  /** What the session was charged before the proxy (re)started, when the account is first seen. */
  spentBefore: () => number;
  /** The most the call can cost. */
  worstCaseUsd: number;
  /** The least the call can cost (its input): below this it is refused. */
  minimumUsd: number;
  /**
   * When true (streams, which can be cut off at the budget) a call may hold
   * less than its worst case, down to `minimumUsd`; otherwise the whole
   * worst case must fit.
   */
  partial: boolean;
}

export class BudgetLedger {
  readonly #accounts = new Map<string, Account>();

  #account(input: { session: string; limitUsd: number; spentBefore: () => number }): Account {
    let account = this.#accounts.get(input.session);
    if (!account) {
      account = { limitUsd: input.limitUsd, spentUsd: input.spentBefore(), reservedUsd: 0 };
      this.#accounts.set(input.session, account);
    }
    return account;
  }

  /** Holds budget for one call, or throws `budget_exhausted`. */
  reserve(input: ReserveInput): Reservation {
    const account = this.#account(input);
    const available = account.limitUsd - account.spentUsd - account.reservedUsd;
    const budget = `$${account.limitUsd.toFixed(4)}`;
    if (available <= 0 || available < input.minimumUsd) {
      throw new ProxyError(
        "budget_exhausted",
        `the session's budget of ${budget} is exhausted ($${account.spentUsd.toFixed(4)} spent, $${account.reservedUsd.toFixed(4)} held by calls in flight); the session must end or be given a new token with a budget`,
      );
    }
    if (!input.partial && input.worstCaseUsd > available) {
      throw new ProxyError(
        "budget_exhausted",
        `this call could cost up to $${input.worstCaseUsd.toFixed(4)} but only $${available.toFixed(4)} of the session's ${budget} budget is left; lower max_tokens, stream the call (streams are cut off at the budget), or end the session`,
      );
    }
    const amountUsd = Math.min(input.worstCaseUsd, available);
    account.reservedUsd += amountUsd;
    let settled = false;
    return {
      session: input.session,
      amountUsd,
      settle(actualUsd: number) {
        if (settled) return;
        settled = true;
        account.reservedUsd -= amountUsd;
        account.spentUsd += actualUsd;
      },
    };
  }

  /**
   * Drops a session's account when its tokens are revoked, so the ledger does
   * not grow without end. Calls still in flight keep their reservation; a new
   * token for the session starts again from the store's record of what it spent.
   */
  forget(session: string): void {
    this.#accounts.delete(session);
  }

  /** Spent and held dollars of a session (for tests and usage reports). */
  snapshot(session: string): { limitUsd: number; spentUsd: number; reservedUsd: number } | undefined {
    const account = this.#accounts.get(session);
    return account ? { ...account } : undefined;
  }
}
