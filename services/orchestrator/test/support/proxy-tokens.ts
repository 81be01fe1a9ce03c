import path from "node:path";
import Database from "better-sqlite3";

/** The sessions of the job whose LLM proxy tokens are still live, read from the embedded proxy's SQLite store under `home`. */
export function liveTokensOf(home: string, jobId: string): string[] {
  const db = new Database(path.join(home, "llm-proxy", "llm-proxy.sqlite"), { readonly: true });
  try {
    const rows = db.prepare("SELECT session FROM session_tokens WHERE job = ? AND revoked_at IS NULL").all(jobId);
    return (rows as { session: string }[]).map((r) => r.session);
  } finally {
    db.close();
  }
}
