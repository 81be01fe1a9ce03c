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
import { randomBytes } from "node:crypto";
import { credentialDigest, type Principal, type SessionCredentials } from "@oz0/serving";
import { permissionDenied } from "../orchestrator-error.js";
import { readSessionsFile, writeSessionsFile } from "./console-sessions-file.js";

export interface ConsoleLoginOptions {
  /** How long a code may wait to be redeemed. Default 5 minutes. */
  codeTtlMs?: number;
  /** How long a session lasts. Default 12 hours. */
  sessionTtlMs?: number;
  /** At most this many unredeemed codes and this many sessions; the oldest go first. Default 1,000. */
  limit?: number;
  now?: () => number;
  /** Keep sessions (their tokens' digests only) in this file, so they survive a restart. */
  sessionsFile?: string;
}

type Person = Extract<Principal, { kind: "person" }>;

interface Entry {
  principal: Person;
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
  readonly #codeTtlMs: number;
  readonly #sessionTtlMs: number;
  readonly #limit: number;
  readonly #now: () => number;
  readonly #sessionsFile: string | undefined;

  constructor(options: ConsoleLoginOptions = {}) {
    this.#codeTtlMs = options.codeTtlMs ?? 5 * 60_000;
    this.#sessionTtlMs = options.sessionTtlMs ?? 12 * 60 * 60_000;
    this.#limit = options.limit ?? 1_000;
    this.#now = options.now ?? Date.now;
    this.#sessionsFile = options.sessionsFile;
    if (this.#sessionsFile)
      for (const s of readSessionsFile(this.#sessionsFile, this.#now()))
        remember(this.#sessions, s.digest, s, this.#limit);
  }

  /** A code that opens a session as `principal` (with its roles as they are now), once. */
  createCode(principal: Principal): { code: string; expiresAt: Date } {
    if (principal.kind !== "person")
      throw permissionDenied("only a person can log in to the console: a service or node credential opens no session");
    const code = randomBytes(24).toString("base64url");
    const until = this.#now() + this.#codeTtlMs;
    remember(this.#codes, credentialDigest(code), { principal, until }, this.#limit);
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
    const until = this.#now() + this.#sessionTtlMs;
    const principal: Person = { ...entry.principal, via: "console" };
    remember(this.#sessions, credentialDigest(token), { principal, until }, this.#limit);
    this.#saveSessions();
    return { token, expiresAt: new Date(until), principal };
  }

  principalOf(digest: string): Principal | undefined {
    const entry = this.#sessions.get(digest);
    if (!entry) return undefined;
    if (entry.until > this.#now()) return entry.principal;
    this.#sessions.delete(digest);
    return undefined;
  }

  /** Ends the session whose token has this digest; false when it is not a console session. */
  logout(digest: string): boolean {
    const ended = this.#sessions.delete(digest);
    if (ended) this.#saveSessions();
    return ended;
  }

  #saveSessions(): void {
    if (!this.#sessionsFile) return;
    const now = this.#now();
    writeSessionsFile(
      this.#sessionsFile,
      [...this.#sessions].filter(([, e]) => e.until > now).map(([digest, e]) => ({ digest, ...e })),
    );
  }
}

function remember(map: Map<string, Entry>, key: string, entry: Entry, limit: number): void {
  while (map.size >= limit) map.delete(map.keys().next().value!);
  map.set(key, entry);
}
