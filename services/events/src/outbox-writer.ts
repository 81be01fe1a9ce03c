// The outbox's one writer, in a thread of its own, committing in groups.
// Every Publish call waits for its events to be durable (synchronous=FULL: an
// fsync of the write-ahead log per commit), and an insert touches three
// B-trees; on the service's one thread both held up every other call and the
// relay behind them. Here the Publish calls that arrive while a commit is
// being written and synced are committed together in the next transaction, as
// soon as that one is done (no timer): one fsync for all of them, each call
// answered only once the transaction holding its events committed. The main
// thread keeps its own connection for reads (Watch, Transcript, the relay's
// catch-up after a restart), which in WAL mode never wait for this one.
import Database from "better-sqlite3";
import { parentPort, workerData } from "node:worker_threads";
import { INSERT_EVENT, UPDATE_CURSOR, insertRows, pruneStepOn, type AppendRows, type PruneRequest } from "./outbox-statements.js";

export interface OutboxWriterData {
  /** The outbox's `events.sqlite`; the main thread created the schema. */
  file: string;
}

/** One Publish call's events. */
export interface AppendRequest extends AppendRows {
  kind: "append";
  id: number;
}

export type ToOutboxWriter =
  | AppendRequest
  /** Every event up to `position` is on Kafka (no fsync: see `Outbox`). */
  | { kind: "cursor"; position: bigint }
  /** Retention, one step (`Outbox.pruneStep`). */
  | ({ kind: "prune"; id: number } & PruneRequest)
  /** The checkpointer thread stopped: checkpoint here again, as SQLite does by default. */
  | { kind: "checkpoint-here" }
  | { kind: "close" };

export type FromOutboxWriter =
  /** Per event of the request, its position, or 0 when its id was already stored. */
  | { kind: "appended"; id: number; positions: BigInt64Array }
  | { kind: "pruned"; id: number; changes: number; through: bigint }
  | { kind: "failed"; id: number; message: string };

const port = parentPort!;
const { file } = workerData as OutboxWriterData;

const db = new Database(file);
db.defaultSafeIntegers(true);
db.pragma("busy_timeout = 5000");
// WAL with synchronous=FULL: an acknowledged Publish survives power loss.
db.pragma("journal_mode = WAL");
db.pragma("synchronous = FULL");
// The checkpointer thread (outbox-checkpointer.ts) copies the log back; a
// high threshold here is only a backstop, should it fall behind.
db.pragma("wal_autocheckpoint = 8000");
// The relay's cursor is written on a connection of its own without fsync:
// losing its last update to a power cut only means re-sending a batch, which
// consumers drop by event id; an fsync per Kafka batch cost more than the
// batch. It never checkpoints: without syncs, its checkpoint could let the
// log restart over events the database file does not durably hold yet.
const cursorDb = new Database(file);
cursorDb.pragma("busy_timeout = 5000");
cursorDb.pragma("synchronous = OFF");
cursorDb.pragma("wal_autocheckpoint = 0");

const insert = db.prepare(INSERT_EVENT);
const updateCursor = cursorDb.prepare(UPDATE_CURSOR);
const post = (message: FromOutboxWriter): void => port.postMessage(message);

const commitGroup = db.transaction((group: AppendRequest[]): BigInt64Array[] => group.map((request) => insertRows(insert, request)));

let group: AppendRequest[] = [];
let cursor: bigint | undefined;
let scheduled = false;

// Everything that arrived while the last commit ran is taken at once. A
// failed group is failed whole (nothing of it was stored), so each caller can
// say so and its producer send the events again.
function writeAll(): void {
  scheduled = false;
  const pending = group;
  group = [];
  if (pending.length > 0) {
    try {
      const positions = commitGroup(pending);
      pending.forEach((request, i) => {
        const answer = positions[i]!;
        port.postMessage({ kind: "appended", id: request.id, positions: answer } satisfies FromOutboxWriter, [answer.buffer as ArrayBuffer]);
      });
    } catch (error) {
      for (const request of pending) post({ kind: "failed", id: request.id, message: (error as Error).message });
    }
  }
  if (cursor !== undefined) {
    const position = cursor;
    cursor = undefined;
    try {
      updateCursor.run(position);
    } catch {
      // Only a re-send after a restart is at stake; the next batch writes it again.
    }
  }
}

function schedule(): void {
  if (scheduled) return;
  scheduled = true;
  // After the messages already queued for this thread are all taken in.
  setImmediate(writeAll);
}

port.on("message", (message: ToOutboxWriter) => {
  switch (message.kind) {
    case "append":
      group.push(message);
      schedule();
      return;
    case "cursor":
      cursor = message.position;
      schedule();
      return;
    case "prune": {
      // Appends already queued go first, so a step never sees fewer events than were answered.
      writeAll();
      try {
        const step = pruneStepOn(db, message);
        post({ kind: "pruned", id: message.id, changes: step.changes, through: step.through });
      } catch (error) {
        post({ kind: "failed", id: message.id, message: (error as Error).message });
      }
      return;
    }
    case "checkpoint-here":
      db.pragma("wal_autocheckpoint = 1000");
      return;
    case "close":
      writeAll();
      cursorDb.close();
      db.close();
      port.close();
      return;
  }
});
