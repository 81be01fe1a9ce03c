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

export const UPDATE_CURSOR =
  "INSERT INTO relay_cursor (name, delivered) VALUES ('kafka', ?) ON CONFLICT (name) DO UPDATE SET delivered = excluded.delivered";

/**
 * Rows per INSERT statement: one statement per row cost about 1.3 µs of CPU
 * per event more than one per hundred (SQLite's work per statement and
 * better-sqlite3's per call), once time-ordered ids had made the indexes
 * cheap (issue 24).
 */
export const INSERT_CHUNK = 100;

/** The outbox's inserts, prepared once (`prepareInserts`). */
export interface Inserts {
  /** One row. */
  one: Database.Statement;
  /** `INSERT_CHUNK` rows. */
  chunk: Database.Statement;
  /** The rows stored after a position, in order, as `[position, id]`: which rows of a chunk were new. */
  storedAfter: Database.Statement;
  /** The chunk's parameters, reused. */
  params: unknown[];
}

export function prepareInserts(db: Database.Database): Inserts {
  const columns = "INSERT OR IGNORE INTO events (id, job_id, event, accepted_at) VALUES ";
  return {
    one: db.prepare(`${columns}(?, ?, ?, ?)`),
    chunk: db.prepare(columns + new Array<string>(INSERT_CHUNK).fill("(?, ?, ?, ?)").join(", ")),
    storedAfter: db.prepare("SELECT position, id FROM events WHERE position > ? ORDER BY position").raw(true),
    params: new Array<unknown>(INSERT_CHUNK * 4),
  };
}

/**
 * Inserts the rows (inside the caller's transaction, the only writer), after
 * `last`, the highest position stored; per row its position, or 0 when its id
 * was already stored.
 */
export function insertRows(inserts: Inserts, rows: AppendRows, last: bigint): BigInt64Array {
  const count = rows.ids.length;
  const positions = new BigInt64Array(count);
  let i = 0;
  for (; i + INSERT_CHUNK <= count; i += INSERT_CHUNK) {
    const params = inserts.params;
    for (let j = 0; j < INSERT_CHUNK; j++) {
      params[j * 4] = rows.ids[i + j];
      params[j * 4 + 1] = rows.jobIds[i + j];
      params[j * 4 + 2] = rows.json[i + j];
      params[j * 4 + 3] = rows.acceptedAt;
    }
    const info = inserts.chunk.run(params);
    if (info.changes === 0) continue;
    if (info.changes === INSERT_CHUNK) {
      // Every row new: their positions are consecutive, ending at the last row id.
      last = info.lastInsertRowid as bigint;
      for (let j = 0; j < INSERT_CHUNK; j++) positions[i + j] = last - BigInt(INSERT_CHUNK - 1 - j);
      continue;
    }
    // Some ids were stored already (a producer's retry): the rows after `last`
    // are the chunk's new ones, in the chunk's order; the others get 0.
    const stored = inserts.storedAfter.all(last) as [bigint, string][];
    let k = 0;
    for (let j = 0; j < INSERT_CHUNK && k < stored.length; j++) {
      if (stored[k]![1] !== rows.ids[i + j]) continue;
      positions[i + j] = stored[k]![0];
      k++;
    }
    last = stored[stored.length - 1]![0];
  }
  for (; i < count; i++) {
    const info = inserts.one.run(rows.ids[i], rows.jobIds[i], rows.json[i], rows.acceptedAt);
    if (info.changes === 0) continue;
    // The position is the row id.
    last = info.lastInsertRowid as bigint;
    positions[i] = last;
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
