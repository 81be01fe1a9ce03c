// The outbox's writes (outbox.ts): the rows of a group commit, and retention's steps.
import type Database from "better-sqlite3";

/** One Publish call's events: the rows to store, all accepted at `acceptedAt`. */
export interface AppendRows {
  acceptedAt: number;
  /** Per event: its id, its job id and its public JSON. */
  ids: string[];
  jobIds: string[];
  json: string[];
}

/** Retention, one step; `keepThrough` (the relay's cursor) keeps what Kafka has not received. */
export interface PruneRequest {
  acceptedBefore: number;
  keepThrough: bigint | undefined;
  /** The last position given out: nothing after it is removed. */
  head: bigint;
  chunk: number;
}

export const INSERT_EVENT = "INSERT OR IGNORE INTO events (id, job_id, event, accepted_at) VALUES (?, ?, ?, ?)";
export const UPDATE_CURSOR =
  "INSERT INTO relay_cursor (name, delivered) VALUES ('kafka', ?) ON CONFLICT (name) DO UPDATE SET delivered = excluded.delivered";

/** Inserts the rows (inside the caller's transaction); per row its position, or 0 when its id was already stored. */
export function insertRows(insert: Database.Statement, rows: AppendRows): BigInt64Array {
  const positions = new BigInt64Array(rows.ids.length);
  for (let i = 0; i < rows.ids.length; i++) {
    const info = insert.run(rows.ids[i], rows.jobIds[i], rows.json[i], rows.acceptedAt);
    // The position is the row id.
    positions[i] = info.changes === 0 ? 0n : (info.lastInsertRowid as bigint);
  }
  return positions;
}

/** One retention step in one transaction: how many rows it removed, and through which position (0 when none). */
export function pruneStepOn(db: Database.Database, request: PruneRequest): { changes: number; through: bigint } {
  return db.transaction((): { changes: number; through: bigint } => {
    const low = (db.prepare("SELECT min(position) AS low FROM events").get() as { low: bigint | null }).low;
    if (low === null) return { changes: 0, through: 0n };
    // Never past the last event: positions not given out yet are not removed.
    const next = request.head + 1n;
    let end = low + BigInt(request.chunk) < next ? low + BigInt(request.chunk) : next;
    // Positions grow with acceptance time: the first young enough event in the chunk ends it.
    const young = db
      .prepare(
        "SELECT position FROM events WHERE position >= ? AND position < ? AND accepted_at >= ? ORDER BY position LIMIT 1",
      )
      .get(low, end, request.acceptedBefore) as { position: bigint } | undefined;
    if (young && young.position < end) end = young.position;
    if (request.keepThrough !== undefined && request.keepThrough + 1n < end) end = request.keepThrough + 1n;
    if (end <= low) return { changes: 0, through: 0n };
    const changes = Number(db.prepare("DELETE FROM events WHERE position < ?").run(end).changes);
    db.prepare(
      "INSERT INTO pruned (name, through) VALUES ('retention', ?) ON CONFLICT (name) DO UPDATE SET through = max(through, excluded.through)",
    ).run(end - 1n);
    return { changes, through: end - 1n };
  })();
}
