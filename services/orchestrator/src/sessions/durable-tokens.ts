// Session tokens whose end does not depend on one call succeeding. The LLM
// proxy honours a token until it is revoked, and nothing else ends it: a
// revoke that failed (the proxy away at a job's end) or never ran (the
// orchestrator died between a job's end and its revoke) left a token that
// worked for good. So each token minted is kept in the store until a revoke
// of it succeeded, and a sweep (at start-up and on an interval) revokes the
// kept tokens of jobs that have ended and those whose revoke failed. A sweep
// claims the tokens it revokes, so replicas sweeping at once share them.
// Revoking is idempotent at the proxy, so revoking one twice (after a claim
// ran out, or a process died before it forgot one) does no harm.
import type { Logger } from "@oz0/serving";
import type { JobStore } from "../store/job-store.js";
import type { MintedToken, TokenIssuer } from "./session-runner.js";

/** Kept tokens a sweep claims at a time; it claims again until fewer come back. */
const SWEEP_BATCH = 100;
/**
 * How long a sweep's claim keeps other replicas' sweeps off its tokens: a
 * batch's revokes take milliseconds each, 10 s at worst (LlmProxyClient's
 * timeout). A claim that runs out first only lets another sweep revoke a
 * token again, which changes nothing.
 */
const SWEEP_CLAIM_MS = 10 * 60_000;

export type TokenLedger = Pick<
  JobStore,
  | "recordSessionToken"
  | "markSessionTokenRevokeAsked"
  | "forgetSessionToken"
  | "claimSessionTokensToRevoke"
  | "releaseSessionTokens"
>;

export interface DurableTokensOptions {
  /** What mints and revokes at the proxy (LlmProxyClient). */
  issuer: TokenIssuer;
  store: TokenLedger;
  logger: Logger;
}

export class DurableTokens implements TokenIssuer {
  readonly #o: DurableTokensOptions;
  #timer: ReturnType<typeof setInterval> | undefined;
  #sweeping: Promise<number> | undefined;
  #closed = false;

  constructor(options: DurableTokensOptions) {
    this.#o = options;
  }

  async mint(options: Parameters<TokenIssuer["mint"]>[0]): Promise<MintedToken> {
    // Kept before it exists: a token the proxy minted whose answer was lost
    // (the call failed after the proxy took it), or that this process died
    // just after minting, has a record for the sweep rather than none. A
    // token's id is its session's (the proxy revokes by session), so it is
    // known before the mint.
    await this.#o.store.recordSessionToken(options.sessionId, options.jobId);
    let minted: MintedToken;
    try {
      minted = await this.#o.issuer.mint(options);
    } catch (error) {
      // Maybe minted: left for the next sweep rather than revoked now, which a
      // mint still on its way to the proxy could overtake.
      await this.#dueForSweep(options.sessionId, "whose mint failed; if the LLM proxy minted it, it stays valid there");
      throw error;
    }
    if (minted.tokenId !== options.sessionId) {
      await this.#o.issuer.revoke({ tokenId: minted.tokenId }).catch(() => undefined);
      throw new Error(
        `the token issuer gave session ${options.sessionId} a token with id ${minted.tokenId}; ` +
          "tokens are kept by their session's id, so an issuer must give each token its session's id",
      );
    }
    return minted;
  }

  async revoke(options: { tokenId: string }): Promise<{ neverUsed: boolean }> {
    let answer: { neverUsed: boolean };
    try {
      answer = await this.#o.issuer.revoke(options);
    } catch (error) {
      await this.#dueForSweep(options.tokenId, "whose revoke failed; it stays valid at the LLM proxy");
      throw error;
    }
    // Kept still if this write fails: a later sweep revokes it again, which changes nothing.
    await this.#o.store.forgetSessionToken(options.tokenId).catch(() => undefined);
    return answer;
  }

  /** Marks a kept token for the next sweep whatever its job's state; a store that refuses is logged, `what` saying the cost. */
  async #dueForSweep(tokenId: string, what: string): Promise<void> {
    await this.#o.store
      .markSessionTokenRevokeAsked(tokenId)
      .catch((storeError: unknown) =>
        this.#o.logger.error({ tokenId, err: String(storeError) }, `could not record a session token ${what}`),
      );
  }

  /**
   * Revokes the kept tokens of jobs that have ended and those whose revoke
   * failed; how many it revoked. Stops at the first revoke that fails (the
   * proxy is away): the next sweep goes on. One sweep at a time.
   */
  sweep(): Promise<number> {
    this.#sweeping ??= this.#sweep().finally(() => (this.#sweeping = undefined));
    return this.#sweeping;
  }

  async #sweep(): Promise<number> {
    let revoked = 0;
    while (!this.#closed) {
      const due = await this.#o.store.claimSessionTokensToRevoke({ limit: SWEEP_BATCH, claimMs: SWEEP_CLAIM_MS });
      for (const [i, tokenId] of due.entries()) {
        // A long backlog (the first sweep after migration 16 has every job's) does not hold a shutdown up.
        if (this.#closed) {
          await this.#release(due.slice(i));
          return revoked;
        }
        try {
          await this.#o.issuer.revoke({ tokenId });
        } catch (error) {
          await this.#release(due.slice(i));
          throw error;
        }
        await this.#o.store.forgetSessionToken(tokenId);
        revoked++;
      }
      if (due.length < SWEEP_BATCH) return revoked;
    }
    return revoked;
  }

  /** What a sweep leaves is the next sweep's, here or at another replica; if the store refuses, once the claim runs out. */
  async #release(tokenIds: string[]): Promise<void> {
    await this.#o.store.releaseSessionTokens(tokenIds).catch(() => undefined);
  }

  /** Sweeps now and every `intervalMs` until {@link close}; what a sweep could not do is logged. */
  start(options: { intervalMs: number }): void {
    if (this.#timer) return;
    const sweep = (): void => {
      this.sweep().then(
        (revoked) => {
          if (revoked > 0) this.#o.logger.info({ revoked }, "revoked session tokens left valid at the LLM proxy");
        },
        (error: unknown) =>
          this.#o.logger.warn(
            { err: String(error) },
            "could not revoke session tokens left valid at the LLM proxy; trying again at the next sweep",
          ),
      );
    };
    sweep();
    this.#timer = setInterval(sweep, options.intervalMs).unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#sweeping?.catch(() => undefined);
  }
}
