// Copies the SQLite store's write-ahead log into its database file from a
// thread of its own. A WAL checkpoint ends with an fsync of the database
// file, and SQLite runs one in whichever commit crosses 1,000 pages of log:
// on the proxy's event loop that stalled every call for as long as the disk
// took (tens of milliseconds on a busy machine). So the store's connection
// never checkpoints (wal_autocheckpoint = 0) and this thread, on a connection
// of its own, runs a PASSIVE checkpoint every few hundred milliseconds, which
// never waits for the writer nor holds it up.
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
const timer = setInterval(checkpoint, workerData.intervalMs);
parentPort.on("message", () => {
  clearInterval(timer);
  checkpoint();
  db.close();
  parentPort.postMessage({ closed: true });
  parentPort.close();
});
`;

export class SqliteCheckpointer {
  readonly #worker: Worker;
  #closed: Promise<void> | undefined;

  /** `onError`: a checkpoint failed (it is tried again at the next interval). */
  constructor(options: { file: string; intervalMs?: number; onError: (error: unknown) => void }) {
    const driver = createRequire(import.meta.url).resolve("better-sqlite3");
    this.#worker = new Worker(THREAD, {
      eval: true,
      workerData: { file: options.file, driver, intervalMs: options.intervalMs ?? 250 },
    });
    // The proxy's exit does not wait for it.
    this.#worker.unref();
    this.#worker.on("message", (message: { error?: string }) => {
      if (message.error !== undefined) options.onError(new Error(`WAL checkpoint: ${message.error}`));
    });
    this.#worker.on("error", options.onError);
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
