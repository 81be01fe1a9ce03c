// Checkpoints the outbox's write-ahead log from a thread of its own. SQLite
// otherwise checkpoints inside the commit that crosses its threshold: that
// commit copies megabytes into the database file and fsyncs it twice, and the
// Publish call waiting on it (and every call queued behind it on the service's
// one thread) waits too. Here the checkpoint runs beside the writer (PASSIVE:
// it never blocks a writer or a reader), a few milliseconds after the outbox
// says the log grew by about a megabyte, so the log is copied back while it is
// small and SQLite restarts it from the beginning at the next write.
import Database from "better-sqlite3";
import { parentPort, workerData } from "node:worker_threads";

export interface CheckpointerData {
  /** The outbox's `events.sqlite`. */
  file: string;
}

/** What the outbox posts: `appended` once the log grew by about a megabyte, `close` to end the thread. */
export type ToCheckpointer = "appended" | "close";

const port = parentPort!;
const db = new Database((workerData as CheckpointerData).file);
db.pragma("busy_timeout = 5000");
// A checkpoint syncs the log before it copies and the database after: a log
// is only restarted once what it held is durable in the database file.
db.pragma("synchronous = FULL");

let timer: NodeJS.Timeout | undefined;
port.on("message", (message: ToCheckpointer) => {
  if (message === "close") {
    clearTimeout(timer);
    db.close();
    port.close();
    return;
  }
  // Gather the commits of the next few milliseconds into one checkpoint.
  timer ??= setTimeout(() => {
    timer = undefined;
    try {
      db.pragma("wal_checkpoint(PASSIVE)");
    } catch {
      // Busy or interrupted: the next append asks again.
    }
  }, 10);
});
