// Session budgets held in memory, for a store one proxy process uses alone
// (SQLite). A call reserves its worst-case cost before it is sent and settles
// its actual cost after; the decision and the hold happen in one synchronous
// step on the event loop, so concurrent calls cannot together spend more than
// the budget. (Several replicas need the accounts in their shared store:
// PostgresProxyStore keeps them as locked rows.)
import { randomUUID } from "node:crypto";
import { ProxyError } from "./proxy-error.js";
import type { BudgetSnapshot, Reservation, ReserveInput } from "./proxy-store.js";

export type { Reservation, ReserveInput } from "./proxy-store.js";

interface Account {
  limitUsd: number;
  spentUsd: number;
  reservedUsd: number;
}

/** Who sets a session's budget, for the messages below: a job's log is read by its operator as well as its model. */
const BUDGET_SETTING =
  "an operator raises it with the agent's harness.max_budget_usd (or, for an agent that sets none, the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD)";

/** A session with nothing left (on any proxy, for a shared store: `held` counts every proxy's calls in flight). */
export function budgetExhausted(o: { limitUsd: number; spentUsd: number; heldUsd: number }): ProxyError {
  return new ProxyError(
    "budget_exhausted",
    `the session's budget of $${o.limitUsd.toFixed(4)} is exhausted ($${o.spentUsd.toFixed(4)} spent, $${o.heldUsd.toFixed(4)} held by calls in flight); the session must end (${BUDGET_SETTING})`,
  );
}

/** A whole answer whose worst case does not fit what is left: each call holds its worst case until it ends. */
export function callOverBudget(o: { worstCaseUsd: number; availableUsd: number; limitUsd: number }): ProxyError {
  return new ProxyError(
    "budget_exhausted",
    `this call could cost up to $${o.worstCaseUsd.toFixed(4)} but only $${o.availableUsd.toFixed(4)} of the session's $${o.limitUsd.toFixed(4)} budget is left (a call holds its worst case, its max_tokens at the model's price, until it ends); lower max_tokens or stream the call (streams are cut off at the budget); ${BUDGET_SETTING}`,
  );
}

export interface BudgetLedgerOptions {
  /** What a session was charged before this process started: an account's starting point when first seen. */
  spentBefore: (session: string) => number | Promise<number>;
}

export class BudgetLedger {
  readonly #accounts = new Map<string, Account>();
  /** Accounts whose starting point is being read, so concurrent first calls open one account. */
  readonly #opening = new Map<string, Promise<Account>>();
  readonly #spentBefore: (session: string) => number | Promise<number>;

  constructor(options: BudgetLedgerOptions) {
    this.#spentBefore = options.spentBefore;
  }

  /** Holds budget for one call, or rejects with `budget_exhausted`. */
  reserve(input: ReserveInput): Promise<Reservation> {
    const account = this.#accounts.get(input.session);
    // The common case stays synchronous up to the hold: no await between the check and the reservation.
    if (account) return settled(() => this.#hold(account, input));
    return this.#open(input).then((opened) => this.#hold(opened, input));
  }

  #open(input: ReserveInput): Promise<Account> {
    let opening = this.#opening.get(input.session);
    if (!opening) {
      const start = (spentUsd: number): Account => {
        this.#opening.delete(input.session);
        // An account opened meanwhile (by a synchronous starting point) wins.
        let account = this.#accounts.get(input.session);
        if (!account) {
          account = { limitUsd: input.limitUsd, spentUsd, reservedUsd: 0 };
          this.#accounts.set(input.session, account);
        }
        return account;
      };
      let spent: number | Promise<number>;
      try {
        spent = this.#spentBefore(input.session);
      } catch (error) {
        return Promise.reject(error as Error);
      }
      if (typeof spent === "number") return Promise.resolve(start(spent));
      opening = spent.then(start, (error: unknown) => {
        this.#opening.delete(input.session);
        throw error;
      });
      this.#opening.set(input.session, opening);
    }
    return opening;
  }

  #hold(account: Account, input: ReserveInput): Reservation {
    // A cost that is not a number would make every comparison below false: the budget could never run out.
    if (!Number.isFinite(input.worstCaseUsd) || !Number.isFinite(input.minimumUsd))
      throw new Error(
        `a call's cost could not be computed ($${input.worstCaseUsd} at most, $${input.minimumUsd} at least)`,
      );
    const available = account.limitUsd - account.spentUsd - account.reservedUsd;
    if (available <= 0 || available < input.minimumUsd) {
      throw budgetExhausted({ limitUsd: account.limitUsd, spentUsd: account.spentUsd, heldUsd: account.reservedUsd });
    }
    if (!input.partial && input.worstCaseUsd > available) {
      throw callOverBudget({ worstCaseUsd: input.worstCaseUsd, availableUsd: available, limitUsd: account.limitUsd });
    }
    const amountUsd = Math.min(input.worstCaseUsd, available);
    account.reservedUsd += amountUsd;
    let done = false;
    return {
      // Named for the call's pending record; the hold itself lives only in this
      // process, so a process that dies takes its holds with it (a new one starts
      // from the calls' charges, where an interrupted call counts 0).
      id: randomUUID(),
      session: input.session,
      amountUsd,
      settle(actualUsd: number): Promise<void> {
        if (!done) {
          done = true;
          account.reservedUsd -= amountUsd;
          // Never NaN into the account (see #hold); costOf of finite prices and token counts is finite.
          account.spentUsd += Number.isFinite(actualUsd) ? actualUsd : amountUsd;
        }
        return Promise.resolve();
      },
    };
  }

  /**
   * Drops a session's account when its tokens are revoked, so the ledger does
   * not grow without end. Calls still in flight keep their reservation; a new
   * token for the session starts again from the store's record of what it spent.
   */
  forget(session: string): boolean {
    this.#opening.delete(session);
    return this.#accounts.delete(session);
  }

  /** Spent and held dollars of a session (for tests and usage reports). */
  snapshot(session: string): BudgetSnapshot | undefined {
    const account = this.#accounts.get(session);
    return account ? { ...account } : undefined;
  }
}

function settled<T>(fn: () => T): Promise<T> {
  try {
    return Promise.resolve(fn());
  } catch (error) {
    return Promise.reject(error as Error);
  }
}
