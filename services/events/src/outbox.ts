// The durable local log of public events (SQLite). Publish writes here before
// it answers, so an accepted event survives a crash and a broker outage; the
// Kafka relay reads undelivered rows in position order and marks them
// delivered; Watch and Transcript read the same rows. Only redacted events are
// ever stored: raw producer content never touches the disk. The write-ahead
// log is checkpointed by a thread of its own (outbox-checkpointer.ts).
import { fromJsonString } from "@bufbuild/protobuf";
import { PublicEventSchema, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import Database from "better-sqlite3";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { Worker } from "node:worker_threads";
import { publicEventJson } from "./cloudevents.js";
import type { CheckpointerData, ToCheckpointer } from "./outbox-checkpointer.js";

export interface OutboxOptions {
  /** Folder for `events.sqlite`; undefined keeps the log in memory (tests). */
  dataDir?: string;
  /** The clock events are stamped with when accepted (for retention). Default Date.now. */
  now?: () => number;
}

/** Rows removed per transaction, so retention never holds the log's write lock for long. */
const PRUNE_CHUNK = 10_000;

export interface AppendResult {
  /** The newly stored events, with their positions. */
  appended: PublicEvent[];
  /** Events whose id was already stored. */
  duplicates: number;
}

/** A stored public event: its position and its proto3 JSON (without the position). */
export interface StoredEvent {
  position: bigint;
  json: string;
}

interface Row {
  position: number | bigint;
  event: string;
}

export class Outbox {
  private readonly db: Database.Database;
  // The relay's cursor is written on its own connection without fsync: losing
  // its last update to a power cut only means re-sending a batch, which
  // consumers drop by event id; an fsync per Kafka batch cost more than the batch.
  private readonly cursorDb: Database.Database;
  private readonly insert: Database.Statement;
  private readonly appendAll: (events: PublicEvent[], appended: PublicEvent[], duplicate: () => void) => void;
  private readonly selectUndelivered: Database.Statement;
  private readonly selectCursor: Database.Statement;
  private readonly updateCursor: Database.Statement;
  private readonly waiters = new Set<() => void>();
  private readonly checkpointer: Worker | undefined;
  private readonly checkpointerExited: Promise<void> | undefined;
  private closing = false;
  private head: bigint;
  private pruned: bigint;
  private readonly now: () => number;

  constructor(options: OutboxOptions = {}) {
    let file = ":memory:";
    if (options.dataDir) {
      mkdirSync(options.dataDir, { recursive: true });
      file = path.join(options.dataDir, "events.sqlite");
    }
    this.db = new Database(file);
    this.db.defaultSafeIntegers(true);
    // WAL with synchronous=FULL: an acknowledged Publish survives power loss.
    this.db.pragma("journal_mode = WAL");
    this.db.pragma("synchronous = FULL");
    this.db.exec(`
      -- AUTOINCREMENT: a position is never used twice, even after retention removed the newest rows.
      CREATE TABLE IF NOT EXISTS events (
        position    INTEGER PRIMARY KEY AUTOINCREMENT,
        id          TEXT NOT NULL UNIQUE,
        job_id      TEXT NOT NULL,
        event       TEXT NOT NULL,
        accepted_at INTEGER NOT NULL
      );
      CREATE INDEX IF NOT EXISTS events_by_job ON events (job_id, position);
      -- The relay delivers in position order, so one cursor says what is delivered.
      CREATE TABLE IF NOT EXISTS relay_cursor (
        name      TEXT PRIMARY KEY,
        delivered INTEGER NOT NULL
      );
      -- Retention removes the oldest events: everything up to 'through' is gone.
      CREATE TABLE IF NOT EXISTS pruned (
        name      TEXT PRIMARY KEY,
        through   INTEGER NOT NULL
      );
    `);
    // A log from before retention: its events count as accepted now, so they are kept a full period.
    const columns = this.db.prepare("SELECT name FROM pragma_table_info('events')").all() as { name: string }[];
    if (!columns.some((c) => c.name === "accepted_at")) {
      this.db.exec(`ALTER TABLE events ADD COLUMN accepted_at INTEGER NOT NULL DEFAULT ${Date.now()}`);
    }
    this.now = options.now ?? Date.now;
    this.insert = this.db.prepare("INSERT OR IGNORE INTO events (id, job_id, event, accepted_at) VALUES (?, ?, ?, ?)");
    this.appendAll = this.db.transaction((events: PublicEvent[], appended: PublicEvent[], duplicate: () => void) => {
      const acceptedAt = this.now();
      for (const event of events) {
        // The position is the row id: stored without it, set on read.
        const info = this.insert.run(event.id, event.jobId, publicEventJson(event), acceptedAt);
        if (info.changes === 0) {
          duplicate();
          continue;
        }
        event.position = info.lastInsertRowid as bigint;
        appended.push(event);
      }
    });
    if (file === ":memory:") {
      this.cursorDb = this.db;
    } else {
      this.cursorDb = new Database(file);
      this.cursorDb.defaultSafeIntegers(true);
      this.cursorDb.pragma("busy_timeout = 5000");
      this.cursorDb.pragma("synchronous = OFF");
      // Checkpoints run in their own thread (outbox-checkpointer.ts), off the
      // Publish path. This connection never checkpoints: without syncs, its
      // checkpoint could let the log restart over events the database file
      // does not durably hold yet. The writer keeps a high threshold as a
      // backstop, should the checkpointer fall behind.
      this.cursorDb.pragma("wal_autocheckpoint = 0");
      this.db.pragma("wal_autocheckpoint = 8000");
      const checkpointer = new Worker(new URL("./outbox-checkpointer.js", import.meta.url), {
        workerData: { file } satisfies CheckpointerData,
      });
      checkpointer.unref();
      // Should the thread ever fail, the writer checkpoints by itself again.
      checkpointer.on("error", () => undefined);
      this.checkpointerExited = new Promise((resolve) =>
        checkpointer.once("exit", () => {
          if (!this.closing) this.db.pragma("wal_autocheckpoint = 1000");
          resolve();
        }),
      );
      this.checkpointer = checkpointer;
    }
    this.selectUndelivered = this.db.prepare("SELECT position, event FROM events WHERE position > ? ORDER BY position LIMIT ?");
    this.selectCursor = this.db.prepare("SELECT delivered FROM relay_cursor WHERE name = 'kafka'");
    this.updateCursor = this.cursorDb.prepare(
      "INSERT INTO relay_cursor (name, delivered) VALUES ('kafka', ?) ON CONFLICT (name) DO UPDATE SET delivered = excluded.delivered",
    );
    this.head = this.lastPosition();
    this.pruned = (this.db.prepare("SELECT through FROM pruned WHERE name = 'retention'").get() as { through: bigint } | undefined)?.through ?? 0n;
  }

  /**
   * Store events in one transaction, ignoring ids already stored. Each stored
   * event gets its position set (in place) and is returned in `appended`.
   */
  append(events: PublicEvent[]): AppendResult {
    const appended: PublicEvent[] = [];
    let duplicates = 0;
    this.appendAll(events, appended, () => duplicates++);
    if (appended.length > 0) {
      this.checkpointer?.postMessage("appended" satisfies ToCheckpointer);
      this.head = appended[appended.length - 1]!.position;
      for (const wake of [...this.waiters]) wake();
    }
    return { appended, duplicates };
  }

  /** The position of the last event ever stored (0 when none was), removed ones included. */
  lastPosition(): bigint {
    const row = this.db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'events'").get() as { seq: bigint } | undefined;
    return row?.seq ?? 0n;
  }

  /** Every event up to this position was removed by retention (0: none was). Every Watch page asks, so it is kept in memory. */
  prunedThrough(): bigint {
    return this.pruned;
  }

  /**
   * Retention, one step: removes up to 10,000 of the oldest events accepted
   * before `acceptedBefore` (ms since the epoch), but with `keepUndelivered`
   * never one the relay has not delivered to Kafka yet. Returns how many it
   * removed; 0 when nothing more is due. Each step is short, so a caller
   * working through a large backlog can let other work in between.
   */
  pruneStep(options: { acceptedBefore: number; keepUndelivered: boolean }): number {
    const step = this.db.transaction((): { changes: number; through: bigint } | undefined => {
      const low = (this.db.prepare("SELECT min(position) AS low FROM events").get() as { low: bigint | null }).low;
      if (low === null) return undefined;
      // Never past the last event: positions not given out yet are not removed.
      const next = this.head + 1n;
      let end = low + BigInt(PRUNE_CHUNK) < next ? low + BigInt(PRUNE_CHUNK) : next;
      // Positions grow with acceptance time: the first young enough event in the chunk ends it.
      const young = this.db
        .prepare("SELECT position FROM events WHERE position >= ? AND position < ? AND accepted_at >= ? ORDER BY position LIMIT 1")
        .get(low, end, options.acceptedBefore) as { position: bigint } | undefined;
      if (young && young.position < end) end = young.position;
      if (options.keepUndelivered && this.deliveredThrough() + 1n < end) end = this.deliveredThrough() + 1n;
      if (end <= low) return undefined;
      const changes = this.db.prepare("DELETE FROM events WHERE position < ?").run(end).changes;
      this.db
        .prepare("INSERT INTO pruned (name, through) VALUES ('retention', ?) ON CONFLICT (name) DO UPDATE SET through = max(through, excluded.through)")
        .run(end - 1n);
      return { changes, through: end - 1n };
    })();
    if (!step) return 0;
    // Set once the transaction committed.
    if (step.through > this.pruned) this.pruned = step.through;
    return step.changes;
  }

  /** Retention, all at once: `pruneStep` until nothing more is due. Returns how many it removed. */
  prune(options: { acceptedBefore: number; keepUndelivered: boolean }): number {
    let removed = 0;
    for (let step = this.pruneStep(options); step > 0; step = this.pruneStep(options)) removed += step;
    return removed;
  }

  /** Events from `fromPosition` (inclusive), optionally only one job's, in order. */
  read(options: { fromPosition: bigint; jobId?: string; limit: number }): PublicEvent[] {
    const rows = (
      options.jobId
        ? this.db
            .prepare("SELECT position, event FROM events WHERE job_id = ? AND position >= ? ORDER BY position LIMIT ?")
            .all(options.jobId, options.fromPosition, options.limit)
        : this.db
            .prepare("SELECT position, event FROM events WHERE position >= ? ORDER BY position LIMIT ?")
            .all(options.fromPosition, options.limit)
    ) as Row[];
    return rows.map(toEvent);
  }

  /** Every event of one job, in order. */
  job(jobId: string): PublicEvent[] {
    const rows = this.db
      .prepare("SELECT position, event FROM events WHERE job_id = ? ORDER BY position")
      .all(jobId) as Row[];
    return rows.map(toEvent);
  }

  /**
   * The oldest events not yet delivered to Kafka, in position order, as the
   * stored JSON (the relay ships it as is, without parsing it back).
   */
  undelivered(limit: number): StoredEvent[] {
    const rows = this.selectUndelivered.all(this.deliveredThrough(), limit) as Row[];
    return rows.map((row) => ({ position: BigInt(row.position), json: row.event }));
  }

  /** How many events wait for delivery. */
  undeliveredCount(): number {
    const row = this.db.prepare("SELECT count(*) AS n FROM events WHERE position > ?").get(this.deliveredThrough()) as { n: bigint };
    return Number(row.n);
  }

  /** Every event up to `position` is on Kafka. */
  markDeliveredThrough(position: bigint): void {
    this.updateCursor.run(position);
  }

  private deliveredThrough(): bigint {
    const row = this.selectCursor.get() as { delivered: bigint } | undefined;
    return row?.delivered ?? 0n;
  }

  /** Resolves once an event after `position` is stored, or when `signal` aborts. */
  waitForAfter(position: bigint, signal?: AbortSignal): Promise<void> {
    if (this.head > position || signal?.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = (): void => {
        this.waiters.delete(done);
        signal?.removeEventListener("abort", done);
        resolve();
      };
      this.waiters.add(done);
      signal?.addEventListener("abort", done, { once: true });
    });
  }

  /** The current last position, as last appended (no query). */
  get headPosition(): bigint {
    return this.head;
  }

  async close(): Promise<void> {
    for (const wake of [...this.waiters]) wake();
    this.closing = true;
    if (this.checkpointer) {
      // Unreferenced while it works, so it never keeps a process alive; held
      // now, so the wait for it does.
      this.checkpointer.ref();
      this.checkpointer.postMessage("close" satisfies ToCheckpointer);
      await this.checkpointerExited;
    }
    if (this.cursorDb !== this.db) this.cursorDb.close();
    this.db.close();
  }
}

function toEvent(row: Row): PublicEvent {
  const event = fromJsonString(PublicEventSchema, row.event);
  event.position = BigInt(row.position);
  return event;
}
