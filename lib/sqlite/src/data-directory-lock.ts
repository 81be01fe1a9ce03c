// One process at a time in a data directory. A service whose files assume
// they have one writer (the events service's outbox numbers its rows from the
// head it read; the LLM proxy takes every slot file but its own for a dead
// process's and replays and removes it at start) would, beside a second
// process on the same directory, lose or corrupt what the first one is
// writing. So such a service takes this lock before it opens anything there,
// and a second one fails at start, saying which process holds the directory.
//
// The lock is SQLite's own: a write transaction left open on a small file of
// its own (`<name>.lock`), which takes a POSIX advisory lock on it (`fcntl`).
// The kernel drops it when the process ends however it ends (SIGKILL, a
// crash), so there is no stale lock to clear by hand and no timeout to guess;
// SQLite also refuses a second connection in the same process. The holder's
// pid is written beside it (`<name>.lock.pid`) only to name it in the error.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";

export interface DataDirectoryLockOptions {
  /** The data directory (made when missing, 0700). */
  dir: string;
  /** The lock file's name and the service named in the error, e.g. "events". */
  name: string;
}

export interface DataDirectoryLock {
  /** Lets the directory go (idempotent); a process that ends lets it go anyway. */
  release(): void;
}

/** Thrown when another process (or another store of this one) holds the directory. */
export class DataDirectoryInUseError extends Error {
  readonly code = "data_directory_in_use";
  constructor(message: string) {
    super(message);
    this.name = "DataDirectoryInUseError";
  }
}

/** Takes the directory for this process, or throws DataDirectoryInUseError at once (no waiting). */
export function lockDataDirectory(options: DataDirectoryLockOptions): DataDirectoryLock {
  mkdirSync(options.dir, { recursive: true, mode: 0o700 });
  const file = path.join(options.dir, `${options.name}.lock`);
  const pidFile = `${file}.pid`;
  // timeout 0: a held lock is an answer, not something to wait out.
  const db = new Database(file, { timeout: 0 });
  try {
    db.exec("BEGIN IMMEDIATE");
  } catch (error) {
    db.close();
    if ((error as { code?: string }).code !== "SQLITE_BUSY") throw error;
    const holder = heldBy(pidFile);
    throw new DataDirectoryInUseError(
      `the data directory ${options.dir} is in use by another ${options.name} process` +
        `${holder === undefined || holder === process.pid ? "" : ` (pid ${holder})`}` +
        `${holder === process.pid ? " (this process: a store opened twice)" : ""}; ` +
        `stop it first, or give this one a data directory of its own`,
    );
  }
  writeFileSync(pidFile, `${process.pid}\n`, { mode: 0o600 });
  let held = true;
  return {
    release: () => {
      if (!held) return;
      held = false;
      // Closing with the transaction open rolls it back (it wrote nothing) and drops the lock.
      db.close();
    },
  };
}

function heldBy(pidFile: string): number | undefined {
  try {
    const pid = Number.parseInt(readFileSync(pidFile, "utf8"), 10);
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
