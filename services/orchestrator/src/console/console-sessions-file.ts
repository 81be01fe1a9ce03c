// Console sessions kept in a file of the data directory, so a restart of the
// orchestrator does not log every open console out (the page resumes its
// streams and carries on). Only each token's SHA-256 is written, with the
// principal and when the session ends: the file opens no session by itself.
// Beside them, the OIDC tokens a console logged out, until they expire.
// Written whole to a temporary file and renamed, readable by this user only.
import { readFileSync } from "node:fs";
import type { Principal, Role, SessionOrigin } from "@oz0/serving";
import { replaceFile } from "../replace-file.js";

type Person = Extract<Principal, { kind: "person" }>;

export interface StoredSession {
  digest: string;
  principal: Person;
  origin: SessionOrigin;
  until: number;
}

interface FileEntry {
  digest: string;
  id: string;
  groups: string[];
  roles: Role[];
  origin: SessionOrigin;
  until: number;
}

const ORIGINS: readonly string[] = ["oidc", "token", "owner"] satisfies SessionOrigin[];

/**
 * The sessions in `file` that have not ended by `now`, and the OIDC tokens logged out that have not expired by
 * then; none when it is missing or unreadable.
 */
export function readSessionsFile(file: string, now: number): { sessions: StoredSession[]; loggedOut: StoredSession[] } {
  let stored: { sessions?: unknown; loggedOut?: unknown };
  try {
    stored = JSON.parse(readFileSync(file, "utf8")) as typeof stored;
  } catch {
    return { sessions: [], loggedOut: [] };
  }
  return { sessions: entriesOf(stored?.sessions, now), loggedOut: entriesOf(stored?.loggedOut, now) };
}

function entriesOf(entries: unknown, now: number): StoredSession[] {
  if (!Array.isArray(entries)) return [];
  return (entries as FileEntry[])
    .filter(
      (e) =>
        typeof e?.digest === "string" &&
        typeof e.id === "string" &&
        Array.isArray(e.roles) &&
        Array.isArray(e.groups) &&
        typeof e.until === "number" &&
        e.until > now &&
        // A session kept before sessions named how their person logged in: it cannot be checked against the
        // configuration at each call, so it is not taken back (its person logs in again).
        ORIGINS.includes(e.origin),
    )
    .map((e) => ({
      digest: e.digest,
      until: e.until,
      origin: e.origin,
      principal: { kind: "person", id: e.id, groups: e.groups, roles: new Set(e.roles), via: "console" },
    }));
}

export function writeSessionsFile(
  file: string,
  sessions: Iterable<StoredSession>,
  loggedOut: Iterable<StoredSession> = [],
): void {
  const entries = (list: Iterable<StoredSession>): FileEntry[] =>
    [...list].map((s) => ({
      digest: s.digest,
      id: s.principal.id,
      groups: [...s.principal.groups],
      roles: [...s.principal.roles],
      origin: s.origin,
      until: s.until,
    }));
  replaceFile(file, `${JSON.stringify({ sessions: entries(sessions), loggedOut: entries(loggedOut) })}\n`, {
    mode: 0o600,
  });
}
