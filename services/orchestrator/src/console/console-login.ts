// One-time login codes and the console sessions they open. A person who
// already holds a credential (the owner, through `oz0 dev`) mints a code; the
// page redeems it once for a session token of its own. So the credential
// itself is never in a URL, a code in a browser's history is worthless once
// used or a few minutes old, and a session token ends on its own.
//
// Both live in this process's memory, known by SHA-256 only. Sessions are
// also kept in `sessionsFile` when given (the orchestrator's data directory),
// so a restart keeps open consoles logged in; another replica does not know
// them (OIDC is the way in past one machine). Codes never outlive the process.
// OIDC tokens a console logged out are kept there too, refused until they expire.
import { randomBytes } from "node:crypto";
import { credentialDigest, type Principal, type SessionCredentials, type SessionOrigin } from "@oz0/serving";
import { permissionDenied } from "../orchestrator-error.js";
import { readSessionsFile, writeSessionsFile } from "./console-sessions-file.js";

export interface ConsoleLoginOptions {
  /** How long a code may wait to be redeemed. Default 5 minutes. */
  codeTtlMs?: number;
  /** How long a session lasts. Default 12 hours. */
  sessionTtlMs?: number;
  /** At most this many unredeemed codes and this many sessions; the oldest go first. Default 1,000. */
  limit?: number;
  /** At most this many unredeemed codes, and this many sessions, of one person; their own oldest go first. Default 20. */
  perPerson?: number;
  now?: () => number;
  /** Keep sessions (their tokens' digests only) in this file, so they survive a restart. */
  sessionsFile?: string;
}

type Person = Extract<Principal, { kind: "person" }>;

interface Entry {
  principal: Person;
  /** How the person had proved who they were (the Authenticator checks it still admits them at every call). */
  origin: SessionOrigin;
  until: number;
}

export interface OpenedSession {
  token: string;
  expiresAt: Date;
  principal: Person;
}

export class ConsoleLogin implements SessionCredentials {
  readonly #codes = new Map<string, Entry>();
  readonly #sessions = new Map<string, Entry>();
  /** OIDC tokens logged out, until they expire: the orchestrator cannot revoke them at the issuer. */
  readonly #loggedOut = new Map<string, Entry>();
  readonly #codeTtlMs: number;
  readonly #sessionTtlMs: number;
  readonly #limit: number;
  readonly #perPerson: number;
  readonly #now: () => number;
  readonly #sessionsFile: string | undefined;

  constructor(options: ConsoleLoginOptions = {}) {
    this.#codeTtlMs = options.codeTtlMs ?? 5 * 60_000;
    this.#sessionTtlMs = options.sessionTtlMs ?? 12 * 60 * 60_000;
    this.#limit = options.limit ?? 1_000;
    this.#perPerson = options.perPerson ?? 20;
    this.#now = options.now ?? Date.now;
    this.#sessionsFile = options.sessionsFile;
    if (this.#sessionsFile) {
      const { sessions, loggedOut } = readSessionsFile(this.#sessionsFile, this.#now());
      for (const s of sessions) this.#remember(this.#sessions, s.digest, s);
      for (const s of loggedOut) this.#remember(this.#loggedOut, s.digest, s);
    }
  }

  /**
   * A code that opens a session as `principal` (whose roles the Authenticator works out again at every call), once.
   * Not from a console session: its code would open a session that outlives it, and so on for ever.
   */
  createCode(principal: Principal): { code: string; expiresAt: Date } {
    if (principal.kind !== "person")
      throw permissionDenied("only a person can log in to the console: a service or node credential opens no session");
    if (principal.via === "console")
      throw permissionDenied(
        "a console session cannot make a login code (it would open a session that outlives it); make one with your own credential: `oz0 console`",
      );
    const code = randomBytes(24).toString("base64url");
    const until = Math.min(this.#now() + this.#codeTtlMs, principal.credentialEnds ?? Infinity);
    this.#remember(this.#codes, credentialDigest(code), { principal, origin: principal.via, until });
    return { code, expiresAt: new Date(until) };
  }

  /**
   * The session `code` opens, or undefined when it was used already, has
   * expired or was never made here; the code is gone after the first call.
   */
  redeem(code: string): OpenedSession | undefined {
    const digest = credentialDigest(code);
    const entry = this.#codes.get(digest);
    this.#codes.delete(digest);
    if (!entry || entry.until <= this.#now()) return undefined;
    const token = randomBytes(32).toString("base64url");
    // No longer than the credential the code was made with: a session from an hour's OIDC token lasted 12 hours,
    // past the token's end and any change of the person's groups at the issuer (attacker review).
    const until = Math.min(this.#now() + this.#sessionTtlMs, entry.principal.credentialEnds ?? Infinity);
    const principal: Person = { ...entry.principal, via: "console" };
    this.#remember(this.#sessions, credentialDigest(token), { principal, origin: entry.origin, until });
    this.#saveSessions();
    return { token, expiresAt: new Date(until), principal };
  }

  sessionOf(digest: string): { principal: Person; origin: SessionOrigin } | undefined {
    const entry = this.#sessions.get(digest);
    if (!entry) return undefined;
    if (entry.until > this.#now()) return entry;
    this.#sessions.delete(digest);
    return undefined;
  }

  /**
   * Ends the credential with this digest that `caller` (the call's principal) used: a console session at once;
   * an OIDC token (the console's ID token, or any) is refused from now until it expires (loggedOut). The page
   * that logged it out sends it to the issuer's end-session endpoint in an address, so the browser's history and
   * the issuer's access log hold it: it must be worth nothing there. Any other credential (the owner's, a
   * configured token) is the configuration's to end, and stays. False when nothing was ended.
   */
  logout(digest: string, caller?: Principal): boolean {
    if (this.#sessions.delete(digest)) {
      this.#saveSessions();
      return true;
    }
    if (caller?.kind !== "person" || caller.via !== "oidc" || caller.credentialEnds === undefined) return false;
    if (caller.credentialEnds <= this.#now()) return false;
    this.#remember(this.#loggedOut, digest, { principal: caller, origin: "oidc", until: caller.credentialEnds });
    this.#saveSessions();
    return true;
  }

  loggedOut(digest: string): boolean {
    const entry = this.#loggedOut.get(digest);
    if (!entry) return false;
    if (entry.until > this.#now()) return true;
    this.#loggedOut.delete(digest);
    return false;
  }

  #saveSessions(): void {
    if (!this.#sessionsFile) return;
    const now = this.#now();
    const live = (map: Map<string, Entry>) =>
      [...map].filter(([, e]) => e.until > now).map(([digest, e]) => ({ digest, ...e }));
    writeSessionsFile(this.#sessionsFile, live(this.#sessions), live(this.#loggedOut));
  }

  /**
   * Keeps `entry`, the oldest of its person's going first past `perPerson`, and the oldest of all past `limit`: a
   * person making codes and sessions by the thousand (a viewer may) pushed everyone else's out, the owner's too.
   */
  #remember(map: Map<string, Entry>, key: string, entry: Entry): void {
    const own = [...map].filter(([, e]) => e.principal.id === entry.principal.id);
    for (const [oldest] of own.slice(0, Math.max(0, own.length - this.#perPerson + 1))) map.delete(oldest);
    while (map.size >= this.#limit) map.delete(map.keys().next().value!);
    map.set(key, entry);
  }
}
