// Session tokens: minted per session by the orchestrator, carried by every
// model call. Only a SHA-256 of each token is stored.
import { hash as digest, randomBytes } from "node:crypto";
import { ProxyError } from "./proxy-error.js";
import type { ProxyStore, TokenRecord, TokenUseAnswer } from "./proxy-store.js";

const PREFIX = "oz0st_";
/** A W3C traceparent of version 00 with ids that are not all zeros (an invalid one names no trace). */
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;

export interface MintTokenInput {
  job: string;
  agent: string;
  session: string;
  /** 0 or absent: no budget. */
  budgetUsd?: number;
  /** The session whose budget account its calls spend from, when not its own (a harness operation's scratch session). */
  budgetSession?: string;
  /** 0 or absent: no limit. The most model calls the session may make (its agent's limits.max_steps). */
  maxModelCalls?: number;
  /** The trace context it is minted in (the MintSessionToken call's `traceparent`); kept when well formed. */
  traceparent?: string;
}

export interface SessionTokensOptions {
  store: ProxyStore;
  now?: () => Date;
}

/** Every model call hashes its token: the one-shot form, without a Hash object (createHash per call showed in profiles). */
export function hashToken(token: string): string {
  return digest("sha256", token, "hex");
}

export class SessionTokens {
  readonly #store: ProxyStore;
  readonly #now: () => Date;
  /** Hot-path cache of live tokens by hash; a token revoked anywhere leaves it (ProxyStore.watch). */
  readonly #live = new Map<string, TokenRecord>();
  /** Bumped by every revocation, so a lookup that raced one does not cache what it read. */
  #generation = 0;

  constructor(options: SessionTokensOptions) {
    this.#store = options.store;
    this.#now = options.now ?? (() => new Date());
    options.store.watch((change) => {
      if (change.kind === "token_revoked") this.#forget(change.hash);
      else if (change.kind === "reset") this.#forget();
    });
  }

  #forget(hash?: string): void {
    this.#generation += 1;
    if (hash === undefined) this.#live.clear();
    else this.#live.delete(hash);
  }

  async mint(input: MintTokenInput): Promise<{ token: string; record: TokenRecord }> {
    for (const [field, name] of [
      ["job", "job"],
      ["agent", "agent"],
      ["session", "session"],
      ["budgetSession", "budget_session"],
    ] as const) {
      const value = input[field];
      if (field === "budgetSession" && !value) continue;
      if (!value) throw new ProxyError("invalid_argument", `MintSessionToken needs a ${name}`);
      if (!/^[\x21-\x7e]{1,256}$/.test(value)) {
        throw new ProxyError(
          "invalid_argument",
          `${name} must be 1 to 256 printable ASCII characters without spaces (it travels as an HTTP header, or names a session that does)`,
        );
      }
    }
    const budgetUsd = input.budgetUsd ?? 0;
    if (!Number.isFinite(budgetUsd) || budgetUsd < 0)
      throw new ProxyError("invalid_argument", "budget_usd must be 0 (no budget) or a positive number of dollars");
    const maxModelCalls = input.maxModelCalls ?? 0;
    // A uint32 on the wire; a column of integer (at most 2^31 - 1) in both stores.
    if (!Number.isInteger(maxModelCalls) || maxModelCalls < 0 || maxModelCalls > 2 ** 31 - 1)
      throw new ProxyError(
        "invalid_argument",
        `max_model_calls must be 0 (no limit) or a whole number of calls up to ${2 ** 31 - 1}, not ${maxModelCalls}`,
      );
    const token = PREFIX + randomBytes(32).toString("base64url");
    const record: TokenRecord = {
      hash: hashToken(token),
      job: input.job,
      agent: input.agent,
      session: input.session,
      budgetUsd,
      maxModelCalls,
      ...(input.budgetSession && input.budgetSession !== input.session ? { budgetSession: input.budgetSession } : {}),
      ...(input.traceparent !== undefined && TRACEPARENT.test(input.traceparent)
        ? { traceparent: input.traceparent }
        : {}),
      createdAt: this.#now(),
    };
    await this.#store.putToken(record);
    this.#live.set(record.hash, record);
    return { token, record };
  }

  /**
   * Ends the token, or every token of a session. `ended`: the records this
   * call ended; `use`: whether any of them (or one ended before) ever
   * carried a model call.
   */
  async revoke(by: { token?: string; session?: string }): Promise<{ ended: TokenRecord[]; use: TokenUseAnswer }> {
    if (!by.token && !by.session)
      throw new ProxyError("invalid_argument", "RevokeSessionToken needs a token or a session");
    const revoked = await this.#store.revokeTokens(
      { ...(by.token ? { hash: hashToken(by.token) } : {}), ...(by.session ? { session: by.session } : {}) },
      this.#now(),
    );
    for (const record of revoked.ended) this.#forget(record.hash);
    // Revoked already (at another replica, whose notice may still be on its way): not live here either.
    if (by.token) this.#forget(hashToken(by.token));
    return revoked;
  }

  /**
   * A model call carries the token: the live token's record, or undefined
   * when unknown or revoked. Its first use here is written to the store
   * (useToken) before the call goes on, so a revocation reports whether the
   * session ever reached a model; later uses are answered from the cache.
   */
  async use(token: string): Promise<TokenRecord | undefined> {
    const hash = hashToken(token);
    const cached = this.#live.get(hash);
    if (cached?.usedAt) return cached;
    const generation = this.#generation;
    const used = await this.#store.useToken(hash, this.#now());
    if (!used) {
      this.#forget(hash);
      return undefined;
    }
    if (generation === this.#generation) this.#live.set(hash, used);
    return used;
  }
}
