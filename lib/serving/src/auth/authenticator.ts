// Turns a bearer credential into a principal. Opaque credentials (service
// tokens, the node token, the owner's, configured people's) are known only by
// their SHA-256, so a service never holds another's secret; OIDC tokens are
// verified against the issuer. Results are kept in memory for their lifetime,
// so a call costs a hash and a map look-up.
import { hash } from "node:crypto";
import { OidcVerifier } from "./oidc-verifier.js";
import { grantedRoles, type PeopleConfig } from "./people-config.js";
import { impliedRoles, ownerPrincipal, ROLES, type Principal, type Role, type ServiceName } from "./principal.js";

export interface AuthSettings {
  /** This service's own credential, sent on the calls it makes (OZ0_SERVICE_TOKEN). */
  serviceToken?: string;
  /** Credentials sent to one audience instead of serviceToken (OZ0_SERVICE_TOKEN_FOR_<AUDIENCE>); see callerToken. */
  audienceTokens?: Partial<Record<ServiceName, string>>;
  /** Services accepted as callers: name → hex SHA-256 of its token (OZ0_PEER_<NAME>_SHA256). */
  peers?: Partial<Record<ServiceName, string>>;
  /** Hex SHA-256 of the sandbox nodes' token; only the APIs nodes call accept it. */
  nodeTokenSha256?: string;
  /** Hex SHA-256 of the embedded owner's credential (OZ0_OWNER_TOKEN_SHA256): a person with every role. */
  ownerTokenSha256?: string;
  /** OIDC, role grants and configured tokens (OZ0_AUTH_CONFIG). */
  people?: PeopleConfig;
  /**
   * Credentials minted while the service runs (the orchestrator's console
   * sessions), asked by digest after the fixed ones; they come and go, so
   * they are never cached here.
   */
  sessions?: SessionCredentials;
}

/** How the person of a session had proved who they were when it opened. */
export type SessionOrigin = "oidc" | "token" | "owner";

/** A store of credentials that live for a while, known by their SHA-256. */
export interface SessionCredentials {
  /** The session's person as it opened (`via: "console"`), and how they had proved who they were. */
  sessionOf(digest: string): { principal: Extract<Principal, { kind: "person" }>; origin: SessionOrigin } | undefined;
  /**
   * Whether the OIDC token with this digest was logged out (the console's Log out) and has not expired yet: it is
   * refused, however valid its signature, because the page that held it let it go (into an address, among others).
   */
  loggedOut?(digest: string): boolean;
}

export type Authentication = { principal: Principal } | { refused: string };

/** Hex SHA-256 of a credential: the form in which services know each other's. Every call's credential is hashed: the one-shot form, without a Hash object. */
export function credentialDigest(token: string): string {
  return hash("sha256", token, "hex");
}

const CACHE_LIMIT = 10_000;

export class Authenticator {
  readonly #opaque = new Map<string, Principal>();
  readonly #people: PeopleConfig;
  readonly #oidc: OidcVerifier | undefined;
  readonly #sessions: SessionCredentials | undefined;
  readonly #ownerConfigured: boolean;
  /** Verified OIDC tokens until they expire. */
  readonly #verified = new Map<string, { principal: Principal; until: number }>();

  constructor(settings: AuthSettings) {
    this.#people = settings.people ?? {};
    for (const [name, digest] of Object.entries(settings.peers ?? {})) {
      if (digest) this.#opaque.set(digest, { kind: "service", id: name as ServiceName });
    }
    if (settings.nodeTokenSha256) this.#opaque.set(settings.nodeTokenSha256, { kind: "node", id: "node" });
    if (settings.ownerTokenSha256) this.#opaque.set(settings.ownerTokenSha256, ownerPrincipal());
    this.#ownerConfigured = settings.ownerTokenSha256 !== undefined && settings.ownerTokenSha256 !== "";
    for (const t of this.#people.tokens ?? []) {
      const groups = t.groups ?? [];
      this.#opaque.set(t.sha256, {
        kind: "person",
        id: t.user,
        groups,
        roles: this.#roles(t.user, groups),
        via: "token",
      });
    }
    this.#oidc = this.#people.oidc ? new OidcVerifier(this.#people.oidc) : undefined;
    this.#sessions = settings.sessions;
  }

  async authenticate(token: string): Promise<Authentication> {
    const digest = credentialDigest(token);
    const known = this.#opaque.get(digest);
    if (known) return { principal: known };
    const session = this.#sessions?.sessionOf(digest);
    if (session) {
      const now = this.#stillPerson(session);
      return now
        ? { principal: now }
        : {
            refused:
              "the console session's person has no credential or role here any more (revoked since it opened); log in again",
          };
    }
    if (!looksLikeJwt(token)) return { refused: "the credential is not one this service accepts (not a known token)" };
    if (this.#sessions?.loggedOut?.(digest))
      return { refused: "this ID token was logged out (Log out in the console): log in again for a new one" };
    if (!this.#oidc)
      return { refused: "the credential is a JWT, but no OIDC issuer is configured here (oidc in OZ0_AUTH_CONFIG)" };
    const cached = this.#verified.get(token);
    if (cached && cached.until > Date.now()) return { principal: cached.principal };
    const person = await this.#oidc.verify(token);
    if (person instanceof Error) return { refused: person.message };
    const principal: Principal = {
      kind: "person",
      id: person.user,
      groups: person.groups,
      roles: this.#roles(person.user, person.groups),
      via: "oidc",
      ...(person.expiresAt ? { credentialEnds: person.expiresAt * 1000 } : {}),
    };
    if (this.#verified.size >= CACHE_LIMIT) this.#verified.delete(this.#verified.keys().next().value!);
    this.#verified.set(token, { principal, until: principal.credentialEnds ?? Date.now() + 60_000 });
    return { principal };
  }

  /**
   * A session's person as the configuration has them now, or undefined when it no longer admits them: the
   * owner credential is gone, their configured token was removed, or no grant gives them a role. A session
   * kept the roles it opened with, so removing a person from the configuration (and restarting) left their open
   * consoles working for hours.
   */
  #stillPerson(session: {
    principal: Extract<Principal, { kind: "person" }>;
    origin: SessionOrigin;
  }): Principal | undefined {
    const { principal, origin } = session;
    let roles: ReadonlySet<Role>;
    if (origin === "owner") {
      if (!this.#ownerConfigured) return undefined;
      roles = new Set(ROLES);
    } else if (origin === "token") {
      const configured = (this.#people.tokens ?? []).find((t) => t.user === principal.id);
      if (!configured) return undefined;
      roles = this.#roles(principal.id, configured.groups ?? []);
    } else roles = this.#roles(principal.id, principal.groups);
    return roles.size > 0 ? { ...principal, roles } : undefined;
  }

  #roles(user: string, groups: readonly string[]): ReadonlySet<Role> {
    return new Set(grantedRoles(this.#people, user, groups).flatMap(impliedRoles));
  }
}

function looksLikeJwt(token: string): boolean {
  return /^[\w-]+\.[\w-]+\.[\w-]+$/.test(token);
}
