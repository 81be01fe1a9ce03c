// The durable local log of public events (SQLite). Publish writes here before
// it answers, so an accepted event survives a crash and a broker outage; the
// Kafka relay reads undelivered rows in position order and marks them
// delivered; Watch and Transcript read the same rows. Only redacted events are
// ever stored: raw producer content never touches the disk. The Publish calls
// of the moment are committed together (group commit); the write-ahead log is
// checkpointed by a thread of its own (outbox-checkpointer.ts) each time it
// grew by about a megabyte.
import { fromJsonString } from "@bufbuild/protobuf";
import { PublicEventSchema, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import { lockDataDirectory, type DataDirectoryLock } from "@oz0/sqlite";
import Database from "better-sqlite3";
import path from "node:path";
import { Worker } from "node:worker_threads";
import { publicEventJson } from "./cloudevents.js";
import type { CheckpointerData, ToCheckpointer } from "./outbox-checkpointer.js";
import {
  UPDATE_CURSOR,
  insertRows,
  prepareInserts,
  pruneStepOn,
  type AppendRows,
  type Inserts,
} from "./outbox-statements.js";

export interface OutboxOptions {
  /** Folder for `events.sqlite`; undefined keeps the log in memory (tests). */
  dataDir?: string;
  /** The clock events are stamped with when accepted (for retention). Default Date.now. */
  now?: () => number;
  /**
   * Keep the events not yet delivered to Kafka in memory too, so the relay
   * ships what was just committed without reading it back (set when a relay
   * runs). Default false.
   */
  relayTail?: boolean;
}

/** Rows removed per transaction, so retention never holds the log's write lock for long. */
const PRUNE_CHUNK = 10_000;
/** Undelivered events the relay's tail holds at most; past it (a long broker outage) the relay reads them back from the log. */
const MAX_RELAY_TAIL = 50_000;
/**
 * About how much the write-ahead log grows before the checkpointer is asked
 * to copy it back: a quarter of SQLite's own threshold (1 000 pages). Asking
 * after every commit cost a checkpoint (two fsyncs, in the checkpointer's
 * thread but in this process) per Publish when producers send an event or two
 * at a time, about 0.5 ms of CPU a call (issue 24).
 */
const CHECKPOINT_AFTER_BYTES = 1 << 20;
/** What a commit adds to the log besides the events' JSON: a page each for the table, the two indexes and sqlite_sequence. */
const COMMIT_LOG_BYTES = 4 * 4096;
/** Log bytes per byte of an event's JSON: its row, and its id and job id in the indexes. */
const LOG_BYTES_PER_JSON_BYTE = 1.5;

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
  private readonly inserts: Inserts;
  private readonly updateCursor: Database.Statement;
  private readonly commitGroup: (group: PendingAppend[]) => BigInt64Array[];
  private readonly selectUndelivered: Database.Statement;
  private readonly waiters = new Set<() => void>();
  private readonly checkpointer: Worker | undefined;
  /** The data directory held for this process (none in memory). */
  private readonly lock: DataDirectoryLock | undefined;
  private readonly checkpointerExited: Promise<void> | undefined;
  private closing = false;
  private head: bigint;
  private pruned: bigint;
  private delivered: bigint;
  private readonly now: () => number;
  /** Publish calls waiting for the next commit. */
  private group: PendingAppend[] = [];
  private groupCommitted: Promise<void> | undefined;
  // What the relay ships next: every event after `tailFloor` that is not
  // delivered yet, in position order, from `tailStart` on (undefined: none kept).
  private readonly tail: StoredEvent[] | undefined;
  private tailStart = 0;
  private tailFloor: bigint;
  /** About how much the log grew since the checkpointer was last asked (an estimate: SQLite does not tell). */
  private logGrowth = 0;

  constructor(options: OutboxOptions = {}) {
    let file = ":memory:";
    if (options.dataDir) {
      // This connection numbers events from the head it read: it must be the only writer.
      this.lock = lockDataDirectory({ dir: options.dataDir, name: "events" });
      file = path.join(options.dataDir, "events.sqlite");
    }
    // Closed, newest first, should the constructor fail: no thread or handle is left on the directory.
    const opened: (() => unknown)[] = [];
    try {
      this.db = new Database(file);
      const db = this.db;
      opened.push(() => db.close());
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
      this.inserts = prepareInserts(this.db);
      this.commitGroup = this.db.transaction((group: PendingAppend[]) => {
        // This connection is the only writer: nothing is stored after the head but what this commit inserts.
        let last = this.head;
        return group.map((pending) => {
          const positions = insertRows(this.inserts, pending.rows, last);
          for (let i = positions.length - 1; i >= 0; i--) {
            if (positions[i] === 0n) continue;
            last = positions[i]!;
            break;
          }
          return positions;
        });
      });
      if (file === ":memory:") {
        this.cursorDb = this.db;
      } else {
        this.cursorDb = new Database(file);
        const cursorDb = this.cursorDb;
        opened.push(() => cursorDb.close());
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
        opened.push(() => checkpointer.terminate());
      }
      this.updateCursor = this.cursorDb.prepare(UPDATE_CURSOR);
      this.selectUndelivered = this.db.prepare(
        "SELECT position, event FROM events WHERE position > ? ORDER BY position LIMIT ?",
      );
      this.head = this.lastPosition();
      this.pruned =
        (
          this.db.prepare("SELECT through FROM pruned WHERE name = 'retention'").get() as
            { through: bigint } | undefined
        )?.through ?? 0n;
      this.delivered =
        (
          this.db.prepare("SELECT delivered FROM relay_cursor WHERE name = 'kafka'").get() as
            { delivered: bigint } | undefined
        )?.delivered ?? 0n;
      // What is in the log already is read back; the tail starts after it.
      this.tail = options.relayTail ? [] : undefined;
      this.tailFloor = this.head;
    } catch (error) {
      for (const close of opened.reverse()) close();
      this.lock?.release();
      throw error;
    }
  }

  /**
   * Store events, ignoring ids already stored; resolves once they are
   * committed. The calls of the moment are committed together: the first
   * waits one turn of the event loop (no timer) for the Publish calls that
   * arrived with it, and calls that arrive while a commit is being synced go
   * into the next. Each stored event gets its position set (in place) and is
   * returned in `appended`, in the order given. Rejects with an
   * `OutboxWriteError` when the commit failed: then none of the group was stored.
   */
  append(events: PublicEvent[]): Promise<AppendResult> {
    if (events.length === 0) return Promise.resolve({ appended: [], duplicates: 0 });
    const ids = new Array<string>(events.length);
    const jobIds = new Array<string>(events.length);
    const json = new Array<string>(events.length);
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!;
      ids[i] = event.id;
      jobIds[i] = event.jobId;
      json[i] = publicEventJson(event);
    }
    return new Promise((resolve, reject) => {
      this.group.push({ events, rows: { acceptedAt: 0, ids, jobIds, json }, resolve, reject });
      this.groupCommitted ??= new Promise<void>((done) =>
        setImmediate(() => {
          this.groupCommitted = undefined;
          this.commitPending();
          done();
        }),
      );
    });
  }

  private commitPending(): void {
    const group = this.group;
    this.group = [];
    if (group.length === 0) return;
    const acceptedAt = this.now();
    for (const pending of group) pending.rows.acceptedAt = acceptedAt;
    let positions: BigInt64Array[];
    try {
      positions = this.commitGroup(group);
    } catch (error) {
      const failure = new OutboxWriteError(`the outbox could not store events: ${(error as Error).message}`);
      for (const pending of group) pending.reject(failure);
      return;
    }
    let stored = false;
    let jsonBytes = 0;
    group.forEach((pending, g) => {
      const at = positions[g]!;
      const appended: PublicEvent[] = [];
      let duplicates = 0;
      for (let i = 0; i < pending.events.length; i++) {
        const position = at[i]!;
        if (position === 0n) {
          duplicates++;
          continue;
        }
        const event = pending.events[i]!;
        event.position = position;
        appended.push(event);
        const json = pending.rows.json[i]!;
        jsonBytes += json.length;
        this.tail?.push({ position, json });
      }
      if (appended.length > 0) {
        stored = true;
        this.head = appended[appended.length - 1]!.position;
      }
      pending.resolve({ appended, duplicates });
    });
    if (!stored) return;
    this.logGrowth += COMMIT_LOG_BYTES + jsonBytes * LOG_BYTES_PER_JSON_BYTE;
    if (this.checkpointer && this.logGrowth >= CHECKPOINT_AFTER_BYTES) {
      this.logGrowth = 0;
      this.checkpointer.postMessage("appended" satisfies ToCheckpointer);
    }
    if (this.tail && this.tail.length - this.tailStart > MAX_RELAY_TAIL) this.dropTail();
    for (const wake of [...this.waiters]) wake();
  }

  /** Forget the tail: the relay reads everything after `head` back from the log. */
  private dropTail(): void {
    if (!this.tail) return;
    this.tail.length = 0;
    this.tailStart = 0;
    this.tailFloor = this.head;
  }

  /** The position of the last event ever stored (0 when none was), removed ones included. */
  lastPosition(): bigint {
    const row = this.db.prepare("SELECT seq FROM sqlite_sequence WHERE name = 'events'").get() as
      { seq: bigint } | undefined;
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
    const step = pruneStepOn(this.db, {
      acceptedBefore: options.acceptedBefore,
      keepThrough: options.keepUndelivered ? this.delivered : undefined,
      head: this.head,
      chunk: PRUNE_CHUNK,
    });
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

  /** The position of one job's newest event (0 when it has none): a job's events changed when this or prunedThrough() did. */
  jobHead(jobId: string): bigint {
    const row = this.db.prepare("SELECT max(position) AS head FROM events WHERE job_id = ?").get(jobId) as {
      head: bigint | null;
    };
    return row.head ?? 0n;
  }

  /** The newest `limit` events of one job, in order, and how many older ones there are. */
  jobTail(jobId: string, limit: number): { events: PublicEvent[]; omitted: number } {
    const rows = this.db
      .prepare("SELECT position, event FROM events WHERE job_id = ? ORDER BY position DESC LIMIT ?")
      .all(jobId, limit) as Row[];
    rows.reverse();
    const oldest = rows[0]?.position;
    const omitted =
      rows.length < limit || oldest === undefined
        ? 0
        : Number(
            (
              this.db
                .prepare("SELECT count(*) AS n FROM events WHERE job_id = ? AND position < ?")
                .get(jobId, oldest) as { n: number | bigint }
            ).n,
          );
    return { events: rows.map(toEvent), omitted };
  }

  /**
   * The oldest events not yet delivered to Kafka, in position order, as the
   * stored JSON (the relay ships it as is, without parsing it back). Those
   * just committed come from memory; older ones (after a restart or a long
   * outage) from the log.
   */
  undelivered(limit: number): StoredEvent[] {
    if (this.tail && this.delivered >= this.tailFloor) {
      let start = this.tailStart;
      while (start < this.tail.length && this.tail[start]!.position <= this.delivered) start++;
      return this.tail.slice(start, start + limit);
    }
    const rows = this.selectUndelivered.all(this.delivered, limit) as Row[];
    return rows.map((row) => ({ position: BigInt(row.position), json: row.event }));
  }

  /** How many events wait for delivery. */
  undeliveredCount(): number {
    const row = this.db.prepare("SELECT count(*) AS n FROM events WHERE position > ?").get(this.delivered) as {
      n: bigint;
    };
    return Number(row.n);
  }

  /** Every event up to `position` is on Kafka. */
  markDeliveredThrough(position: bigint): void {
    this.updateCursor.run(position);
    this.delivered = position;
    if (!this.tail) return;
    while (this.tailStart < this.tail.length && this.tail[this.tailStart]!.position <= position) this.tailStart++;
    // Compact now and then rather than shifting per batch.
    if (this.tailStart > 4_096 && this.tailStart * 2 > this.tail.length) {
      this.tail.splice(0, this.tailStart);
      this.tailStart = 0;
    }
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

  /**
   * How many stored events Kafka has not received yet, counted from positions
   * (no query). A retried event's ignored insert can leave a position unused
   * (SQLite's AUTOINCREMENT), so it may count a few more than there are.
   */
  get undeliveredBacklog(): number {
    return Number(this.head - this.delivered);
  }

  /** Commits what is waiting, then closes the checkpointer and the log. */
  async close(): Promise<void> {
    await this.groupCommitted;
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
    this.lock?.release();
  }
}

/** A commit of the outbox failed: nothing of its group was stored. */
export class OutboxWriteError extends Error {
  readonly code = "OUTBOX_WRITE_FAILED";
}

interface PendingAppend {
  events: PublicEvent[];
  rows: AppendRows;
  resolve: (result: AppendResult) => void;
  reject: (error: Error) => void;
}

function toEvent(row: Row): PublicEvent {
  const event = fromJsonString(PublicEventSchema, row.event);
  event.position = BigInt(row.position);
  return event;
}
