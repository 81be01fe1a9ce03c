// OIDC tokens (JWT) checked against the issuer's published keys with jose:
// signature, issuer, audience, expiry. Keys are fetched once and refreshed by
// jose when a token names a key it does not know.
import { createRemoteJWKSet, errors, jwtVerify, type JWTPayload } from "jose";
import type { OidcConfig } from "./people-config.js";

export interface VerifiedPerson {
  user: string;
  groups: string[];
  /** Seconds since the epoch; the token is not accepted after it. */
  expiresAt: number | undefined;
}

export class OidcVerifier {
  readonly #config: OidcConfig;
  #keys: ReturnType<typeof createRemoteJWKSet> | undefined;
  #discovering: Promise<ReturnType<typeof createRemoteJWKSet>> | undefined;

  constructor(config: OidcConfig) {
    this.#config = config;
  }

  /** The person a token names, or an Error saying why it is refused. */
  async verify(token: string): Promise<VerifiedPerson | Error> {
    let payload: JWTPayload;
    try {
      ({ payload } = await jwtVerify(token, await this.#jwks(), {
        issuer: this.#config.issuer,
        // The web console sends the ID token it logged in with, whose audience is its own client id.
        audience: this.#config.consoleClientId
          ? [this.#config.audience, this.#config.consoleClientId]
          : this.#config.audience,
      }));
    } catch (error) {
      return new Error(refusal(error));
    }
    const userClaim = this.#config.usernameClaim ?? "sub";
    const user = payload[userClaim];
    if (typeof user !== "string" || user === "")
      return new Error(`the token has no ${userClaim} claim naming the person (set oidc.usernameClaim)`);
    const rawGroups = payload[this.#config.groupsClaim ?? "groups"];
    const groups = Array.isArray(rawGroups) ? rawGroups.filter((g): g is string => typeof g === "string") : [];
    return { user, groups, expiresAt: payload.exp };
  }

  async #jwks(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    if (this.#keys) return this.#keys;
    this.#discovering ??= this.#discover().then(
      (keys) => (this.#keys = keys),
      (error: unknown) => {
        this.#discovering = undefined;
        throw error;
      },
    );
    return this.#discovering;
  }

  async #discover(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    if (this.#config.jwksUri) return createRemoteJWKSet(new URL(this.#config.jwksUri));
    const url = `${this.#config.issuer.replace(/\/$/, "")}/.well-known/openid-configuration`;
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) });
    if (!res.ok) throw new Error(`the OIDC issuer's discovery document ${url} answered ${res.status}`);
    const doc = (await res.json()) as { jwks_uri?: unknown };
    if (typeof doc.jwks_uri !== "string")
      throw new Error(`the OIDC discovery document ${url} has no jwks_uri; set oidc.jwksUri`);
    return createRemoteJWKSet(new URL(doc.jwks_uri));
  }
}

function refusal(error: unknown): string {
  if (error instanceof errors.JWTExpired) return "the token has expired; log in again (`oz0 login`)";
  if (error instanceof errors.JWTClaimValidationFailed)
    return `the token's ${error.claim} claim is not accepted here (${error.reason}); check the issuer and audience`;
  if (error instanceof errors.JWSSignatureVerificationFailed)
    return "the token's signature does not verify against the issuer's keys";
  if (error instanceof errors.JWKSNoMatchingKey) return "the token is signed with a key the issuer does not publish";
  if (error instanceof errors.JOSEError) return `the token is not a valid OIDC token (${error.code})`;
  return `the issuer's keys could not be fetched: ${(error as Error).message}`;
}
