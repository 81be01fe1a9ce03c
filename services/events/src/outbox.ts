// The durable local log of public events (SQLite). Publish writes here before
// it answers, so an accepted event survives a crash and a broker outage; the
// Kafka relay reads undelivered rows in position order and marks them
// delivered; Watch and Transcript read the same rows. Only redacted events are
// ever stored: raw producer content never touches the disk. Writes go to a
// thread of their own that commits concurrent Publish calls together
// (outbox-writer.ts); the write-ahead log is checkpointed by another
// (outbox-checkpointer.ts). A log in memory (tests) is written here, at once.
import { fromJsonString } from "@bufbuild/protobuf";
import { PublicEventSchema, type PublicEvent } from "@oz0/proto/oz0/events/v1/events_pb";
import Database from "better-sqlite3";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { Worker } from "node:worker_threads";
import { publicEventJson } from "./cloudevents.js";
import type { CheckpointerData, ToCheckpointer } from "./outbox-checkpointer.js";
import type { FromOutboxWriter, OutboxWriterData, ToOutboxWriter } from "./outbox-writer.js";
import { INSERT_EVENT, UPDATE_CURSOR, insertRows, pruneStepOn, type AppendRows, type PruneRequest } from "./outbox-statements.js";

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
  /** Schema, reads; and every write when the log is in memory. */
  private readonly db: Database.Database;
  private readonly memory: { insert: Database.Statement; updateCursor: Database.Statement } | undefined;
  private readonly selectUndelivered: Database.Statement;
  private readonly waiters = new Set<() => void>();
  private readonly writer: WriterThread | undefined;
  private readonly checkpointer: Worker | undefined;
  private readonly checkpointerExited: Promise<void> | undefined;
  private closing = false;
  private head: bigint;
  private pruned: bigint;
  private delivered: bigint;
  private readonly now: () => number;
  // What the relay ships next: every event after `tailFloor` that is not
  // delivered yet, in position order, from `tailStart` on (undefined: none kept).
  private readonly tail: StoredEvent[] | undefined;
  private tailStart = 0;
  private tailFloor: bigint;

  constructor(options: OutboxOptions = {}) {
    let file = ":memory:";
    if (options.dataDir) {
      mkdirSync(options.dataDir, { recursive: true });
      file = path.join(options.dataDir, "events.sqlite");
    }
    this.db = new Database(file);
    this.db.defaultSafeIntegers(true);
    this.db.pragma("busy_timeout = 5000");
    this.db.pragma("journal_mode = WAL");
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
    if (file === ":memory:") {
      this.memory = { insert: this.db.prepare(INSERT_EVENT), updateCursor: this.db.prepare(UPDATE_CURSOR) };
    } else {
      // This connection only reads from now on: it never checkpoints (the
      // checkpointer thread does; see the writer for the backstop).
      this.db.pragma("wal_autocheckpoint = 0");
      this.writer = new WriterThread(file);
      const checkpointer = startThread("outbox-checkpointer", { file } satisfies CheckpointerData);
      checkpointer.unref();
      // Should the thread ever fail, the writer checkpoints by itself again.
      checkpointer.on("error", () => undefined);
      this.checkpointerExited = new Promise((resolve) =>
        checkpointer.once("exit", () => {
          if (!this.closing) this.writer?.post({ kind: "checkpoint-here" });
          resolve();
        }),
      );
      this.checkpointer = checkpointer;
    }
    this.selectUndelivered = this.db.prepare("SELECT position, event FROM events WHERE position > ? ORDER BY position LIMIT ?");
    this.head = this.lastPosition();
    this.pruned = (this.db.prepare("SELECT through FROM pruned WHERE name = 'retention'").get() as { through: bigint } | undefined)?.through ?? 0n;
    this.delivered = (this.db.prepare("SELECT delivered FROM relay_cursor WHERE name = 'kafka'").get() as { delivered: bigint } | undefined)?.delivered ?? 0n;
    // What is in the log already is read back; the tail starts after it.
    this.tail = options.relayTail ? [] : undefined;
    this.tailFloor = this.head;
  }

  /**
   * Store events, ignoring ids already stored; resolves once they are durable
   * (committed with the other Publish calls of the moment, see outbox-writer.ts).
   * Each stored event gets its position set (in place) and is returned in
   * `appended`, in the order given. Rejects when the commit failed: then none
   * of them was stored.
   */
  async append(events: PublicEvent[]): Promise<AppendResult> {
    if (events.length === 0) return { appended: [], duplicates: 0 };
    const acceptedAt = this.now();
    const ids = new Array<string>(events.length);
    const jobIds = new Array<string>(events.length);
    const json = new Array<string>(events.length);
    for (let i = 0; i < events.length; i++) {
      const event = events[i]!;
      ids[i] = event.id;
      jobIds[i] = event.jobId;
      json[i] = publicEventJson(event);
    }
    const rows: AppendRows = { acceptedAt, ids, jobIds, json };
    const positions = this.writer ? await this.writer.append(rows) : this.db.transaction(() => insertRows(this.memory!.insert, rows))();
    const appended: PublicEvent[] = [];
    let duplicates = 0;
    for (let i = 0; i < events.length; i++) {
      const position = positions[i]!;
      if (position === 0n) {
        duplicates++;
        continue;
      }
      const event = events[i]!;
      event.position = position;
      appended.push(event);
      this.tail?.push({ position, json: json[i]! });
    }
    if (appended.length > 0) {
      this.checkpointer?.postMessage("appended" satisfies ToCheckpointer);
      const last = appended[appended.length - 1]!.position;
      if (last > this.head) this.head = last;
      if (this.tail && this.tail.length - this.tailStart > MAX_RELAY_TAIL) this.dropTail();
      for (const wake of [...this.waiters]) wake();
    }
    return { appended, duplicates };
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
   * never one the relay has not delivered to Kafka yet. Resolves to how many
   * it removed; 0 when nothing more is due. Each step is short, so a caller
   * working through a large backlog can let other work in between.
   */
  async pruneStep(options: { acceptedBefore: number; keepUndelivered: boolean }): Promise<number> {
    const request: PruneRequest = {
      acceptedBefore: options.acceptedBefore,
      keepThrough: options.keepUndelivered ? this.delivered : undefined,
      head: this.head,
      chunk: PRUNE_CHUNK,
    };
    const step = this.writer ? await this.writer.prune(request) : pruneStepOn(this.db, request);
    // Set once the transaction committed.
    if (step.through > this.pruned) this.pruned = step.through;
    return step.changes;
  }

  /** Retention, all at once: `pruneStep` until nothing more is due. Resolves to how many it removed. */
  async prune(options: { acceptedBefore: number; keepUndelivered: boolean }): Promise<number> {
    let removed = 0;
    for (let step = await this.pruneStep(options); step > 0; step = await this.pruneStep(options)) removed += step;
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
    const row = this.db.prepare("SELECT count(*) AS n FROM events WHERE position > ?").get(this.delivered) as { n: bigint };
    return Number(row.n);
  }

  /** Every event up to `position` is on Kafka. */
  markDeliveredThrough(position: bigint): void {
    this.delivered = position;
    if (this.writer) this.writer.post({ kind: "cursor", position });
    else this.memory!.updateCursor.run(position);
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

  /** Waits for the writes in flight, then closes the threads and the log. */
  async close(): Promise<void> {
    for (const wake of [...this.waiters]) wake();
    this.closing = true;
    await this.writer?.close();
    if (this.checkpointer) {
      // Unreferenced while it works, so it never keeps a process alive; held
      // now, so the wait for it does.
      this.checkpointer.ref();
      this.checkpointer.postMessage("close" satisfies ToCheckpointer);
      await this.checkpointerExited;
    }
    this.db.close();
  }
}

export class OutboxWriteError extends Error {
  readonly code = "OUTBOX_WRITE_FAILED";
}

/**
 * The main thread's handle on the writer thread: requests by id, each
 * answered once its transaction committed. A thread that dies fails what it
 * had not answered (none of it was committed, or its caller cannot know: the
 * producer sends it again, and ids already stored are ignored) and is started
 * again for the next request.
 */
class WriterThread {
  private worker: Worker | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (answer: FromOutboxWriter) => void; reject: (error: Error) => void }>();
  private readonly inFlight = new Set<Promise<FromOutboxWriter>>();
  private closed = false;

  constructor(private readonly file: string) {
    this.worker = this.spawn();
  }

  async append(rows: AppendRows): Promise<BigInt64Array> {
    const answer = await this.request((id) => ({ kind: "append", id, ...rows }));
    if (answer.kind !== "appended") throw new OutboxWriteError("the outbox answered an append with something else");
    return answer.positions;
  }

  async prune(request: PruneRequest): Promise<{ changes: number; through: bigint }> {
    const answer = await this.request((id) => ({ kind: "prune", id, ...request }));
    if (answer.kind !== "pruned") throw new OutboxWriteError("the outbox answered a retention step with something else");
    return { changes: answer.changes, through: answer.through };
  }

  /** A message nobody waits for (the relay's cursor, checkpoint settings). */
  post(message: Extract<ToOutboxWriter, { kind: "cursor" | "checkpoint-here" }>): void {
    if (this.closed) return;
    (this.worker ??= this.spawn()).postMessage(message);
  }

  /** Lets the writer answer what it was sent, then ends it. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.inFlight]);
    const worker = this.worker;
    if (!worker) return;
    const exited = new Promise((resolve) => worker.once("exit", resolve));
    worker.postMessage({ kind: "close" } satisfies ToOutboxWriter);
    await exited;
  }

  private request(build: (id: number) => Extract<ToOutboxWriter, { kind: "append" | "prune" }>): Promise<FromOutboxWriter> {
    if (this.closed) return Promise.reject(new OutboxWriteError("the outbox is closed"));
    const worker = (this.worker ??= this.spawn());
    const id = this.nextId++;
    const answer = new Promise<FromOutboxWriter>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage(build(id));
    });
    this.inFlight.add(answer);
    const settled = (): void => void this.inFlight.delete(answer);
    answer.then(settled, settled);
    return answer;
  }

  private spawn(): Worker {
    const worker = startThread("outbox-writer", { file: this.file } satisfies OutboxWriterData);
    worker.on("message", (answer: FromOutboxWriter) => {
      const pending = this.pending.get(answer.id);
      if (!pending) return;
      this.pending.delete(answer.id);
      if (answer.kind === "failed") pending.reject(new OutboxWriteError(`the outbox could not store events: ${answer.message}`));
      else pending.resolve(answer);
    });
    const lost = (reason: string): void => {
      if (this.worker !== worker) return;
      this.worker = undefined;
      const pending = [...this.pending.values()];
      this.pending.clear();
      for (const p of pending) p.reject(new OutboxWriteError(`the outbox's writer thread stopped: ${reason}`));
    };
    worker.on("error", (error) => lost(error.message));
    worker.on("exit", (code) => lost(`exit code ${code}`));
    return worker;
  }
}

// A thread running a module beside this one, as built: tests that need the
// outbox itself import it from dist/, so its threads start there too.
function startThread(name: string, workerData: unknown): Worker {
  return new Worker(new URL(`./${name}.js`, import.meta.url), { workerData });
}

function toEvent(row: Row): PublicEvent {
  const event = fromJsonString(PublicEventSchema, row.event);
  event.position = BigInt(row.position);
  return event;
}
