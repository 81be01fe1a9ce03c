// The console's credential, kept in this browser's localStorage until it
// expires or the person logs out: a session token a one-time code was
// redeemed for, or the ID token of an OIDC log-in (README, "Logging in"). It
// is never the owner credential: that stays in the data directory.
const KEY = "oz0.console.session";

export interface StoredSession {
  token: string;
  /** Milliseconds since the epoch. */
  expiresAt: number;
  /** `oidc`: an ID token from the issuer; absent: a session a login code opened. */
  via?: "oidc";
  /** The issuer's refresh token, when it gave one: the page gets a new ID token with it instead of sending the person back. */
  refreshToken?: string;
}

/** The stored credential even when it has expired (an OIDC one may still be refreshed). */
export function storedSession(): StoredSession | undefined {
  try {
    const stored = JSON.parse(localStorage.getItem(KEY) ?? "null") as StoredSession | null;
    if (!stored || typeof stored.token !== "string" || typeof stored.expiresAt !== "number") return undefined;
    return stored;
  } catch {
    return undefined;
  }
}

/** The credential to use: unexpired, or expired with a refresh token that may renew it. */
export function currentSession(): StoredSession | undefined {
  const stored = storedSession();
  if (!stored) return undefined;
  return stored.expiresAt > Date.now() || stored.refreshToken ? stored : undefined;
}

/**
 * An OIDC log-in whose ID token expired with no refresh token to renew it:
 * the page sends the person through the issuer's log-in again rather than to
 * its own login page.
 */
export function expiredOidcSession(): StoredSession | undefined {
  const stored = storedSession();
  return stored?.via === "oidc" && stored.expiresAt <= Date.now() && !stored.refreshToken ? stored : undefined;
}

export function saveSession(session: StoredSession): void {
  localStorage.setItem(KEY, JSON.stringify(session));
}

export function forgetSession(): void {
  localStorage.removeItem(KEY);
}
