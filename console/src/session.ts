// The console's session token, kept in this browser's localStorage until it
// expires or the person logs out. It is never the owner credential: that stays
// in the data directory; the page holds only what a one-time code was
// redeemed for (README, "Logging in").
const KEY = "oz0.console.session";

export interface StoredSession {
  token: string;
  /** Milliseconds since the epoch. */
  expiresAt: number;
}

export function currentSession(): StoredSession | undefined {
  try {
    const stored = JSON.parse(localStorage.getItem(KEY) ?? "null") as StoredSession | null;
    if (!stored || typeof stored.token !== "string" || stored.expiresAt <= Date.now()) return undefined;
    return stored;
  } catch {
    return undefined;
  }
}

export function saveSession(session: StoredSession): void {
  localStorage.setItem(KEY, JSON.stringify(session));
}

export function forgetSession(): void {
  localStorage.removeItem(KEY);
}
