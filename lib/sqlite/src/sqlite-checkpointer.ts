// Copies a SQLite file's write-ahead log into its database file from a
// thread of its own. A WAL checkpoint ends with an fsync of the database
// file, and SQLite runs one in whichever commit crosses 1,000 pages of log:
// on a service's event loop that stalls everything it serves for as long as
// the disk takes (tens of milliseconds on a busy machine; 12-17 ms here every
// few hundred commits of three rows, against under 1 ms without). So the
// service's connection never checkpoints (wal_autocheckpoint = 0) and this
// thread, on a connection of its own, runs a PASSIVE checkpoint, which never
// waits for the writer nor holds it up. When, by `trigger`:
//  - `counted` (the LLM proxy and the orchestrator's job store, whose
//    stores count their commits, `wrote()`, in memory both threads share):
//    every 250 ms once 64 commits came since the last, else once a second
//    after one did. Each checkpoint costs two fsyncs here and one in the
//    store's next commit (SQLite syncs the log's header when it starts the
//    log again), and copies every page written since the last once: at a few
//    commits a second, one every 250 ms was about one per commit (issue 24).
//    With nothing to checkpoint the thread sleeps on the count itself
//    (Atomics.waitAsync) and the next commit wakes it: an idle service's
//    thread no longer woke every interval to find no commit (issue 24).
//  - `polled` (files also written where no one place sees every commit, as
//    the orchestrator's graphs.db by Kysely and @oz0/graph alike): each
//    interval (1 s) the thread asks `PRAGMA data_version`, which changes when
//    another connection committed, and checkpoints when it did.
import { createRequire } from "node:module";
import { Worker } from "node:worker_threads";

/** The thread's code, CommonJS run from a string: nothing to resolve next to a built or a TypeScript file. */
const THREAD = `
const { parentPort, workerData } = require("node:worker_threads");
const Database = require(workerData.driver);
const db = new Database(workerData.file);
db.pragma("busy_timeout = 1000");
const checkpoint = () => {
  try {
    db.pragma("wal_checkpoint(PASSIVE)");
  } catch (error) {
    parentPort.postMessage({ error: String(error && error.message) });
  }
};
// Commits the store counted (Atomics.add, then Atomics.notify), and how many the last checkpoint came after.
const commits = new Int32Array(workerData.commits);
let checkpointed = 0;
let closed = false;
let timer;
if (workerData.trigger === "polled") {
  // The file's version as this connection last saw it; none at first, so commits made before the thread started
  // are checkpointed on its first look.
  let version = -1;
  timer = setInterval(() => {
    const now = db.pragma("data_version", { simple: true });
    if (now !== version) {
      version = now;
      checkpoint();
    }
  }, workerData.intervalMs);
} else {
  sleep();
}
// Counted: until a commit comes, the thread waits on the count, with no timer; a commit made before the wait
// began is seen by the wait ("not-equal"), so none is missed.
function sleep() {
  const waited = Atomics.waitAsync(commits, 0, checkpointed);
  if (waited.async) waited.value.then(awake);
  else awake();
}
// A commit came: looks every interval, as the thread did all the time before, until a checkpoint leaves nothing
// to copy, then sleeps again.
function awake() {
  if (closed) return;
  let waited = 0;
  timer = setInterval(() => {
    const now = Atomics.load(commits, 0);
    waited += workerData.intervalMs;
    if (now - checkpointed < workerData.commitsPerCheckpoint && waited < workerData.maxWaitMs) return;
    checkpointed = now;
    waited = 0;
    checkpoint();
    if (Atomics.load(commits, 0) !== checkpointed) return;
    clearInterval(timer);
    sleep();
  }, workerData.intervalMs);
}
parentPort.on("message", () => {
  closed = true;
  clearInterval(timer);
  checkpoint();
  db.close();
  parentPort.postMessage({ closed: true });
  parentPort.close();
});
`;

export class SqliteCheckpointer {
  readonly #worker: Worker;
  readonly #commits = new Int32Array(new SharedArrayBuffer(4));
  #closed: Promise<void> | undefined;

  /** `onError`: a checkpoint failed (it is tried again after the next commit). */
  constructor(options: {
    file: string;
    /** How the thread learns of commits (above). Default `counted`. */
    trigger?: "counted" | "polled";
    /** How often the thread looks. Default 250 ms counted, 1 s polled. */
    intervalMs?: number;
    onError: (error: unknown) => void;
  }) {
    const trigger = options.trigger ?? "counted";
    const driver = createRequire(import.meta.url).resolve("better-sqlite3");
    this.#worker = new Worker(THREAD, {
      eval: true,
      workerData: {
        file: options.file,
        driver,
        trigger,
        intervalMs: options.intervalMs ?? (trigger === "polled" ? 1_000 : 250),
        commits: this.#commits.buffer,
        commitsPerCheckpoint: 64,
        maxWaitMs: 1_000,
      },
    });
    // The service's exit does not wait for it.
    this.#worker.unref();
    this.#worker.on("message", (message: { error?: string }) => {
      if (message.error !== undefined) options.onError(new Error(`WAL checkpoint: ${message.error}`));
    });
    this.#worker.on("error", options.onError);
  }

  /** The store committed a write: the log grew (`counted`). Wakes the thread if it sleeps. */
  wrote(): void {
    Atomics.add(this.#commits, 0, 1);
    Atomics.notify(this.#commits, 0, 1);
  }

  /** Checkpoints once more, closes the thread's connection and ends the thread. */
  close(): Promise<void> {
    this.#closed ??= new Promise<void>((resolve) => {
      // Waited for: the process stays up until the thread has closed its connection.
      this.#worker.ref();
      this.#worker.once("exit", () => resolve());
      this.#worker.postMessage("close");
    });
    return this.#closed;
  }
}
