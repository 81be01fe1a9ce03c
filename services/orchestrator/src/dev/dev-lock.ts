// One `oz0 dev` per data directory. Two stacks on one OZ0_HOME share its
// stores but not their sessions: an approval taken by one never reaches a
// session of the other, and the job hangs. The lock is taken atomically
// (proper-lockfile: a directory made with mkdir, kept fresh while held, and
// taken over once stale, so a killed `oz0 dev` does not block the next one);
// the holder's pid is written beside it so the loser can say who holds it.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import lockfile from "proper-lockfile";
import { assertOwnHome } from "./local-credentials.js";
import { processAlive } from "./process-liveness.js";

export class DevLockHeldError extends Error {
  constructor(home: string, holder: string) {
    super(`another oz0 dev already runs on ${home} (${holder}); stop it first, or use it: other commands find it`);
    this.name = "DevLockHeldError";
  }
}

export interface DevLock {
  release(): Promise<void>;
}

/** Takes the data directory's dev lock, or throws DevLockHeldError naming the process that holds it. */
export async function takeDevLock(home: string, onWait?: (line: string) => void): Promise<DevLock> {
  // Before anything is written there: dev.pid is written through whatever is at its name.
  assertOwnHome(home);
  mkdirSync(home, { recursive: true });
  const target = path.join(home, "dev");
  const holderFile = path.join(home, "dev.pid");
  // realpath: false locks the path itself (the target file need not exist); stale after 10 s without a refresh.
  const options = { realpath: false, stale: STALE_MS, update: 2_000, lockfilePath: `${target}.lock` };
  let release: () => Promise<void>;
  try {
    release = await lockfile.lock(target, options);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ELOCKED") throw error;
    const holder = holderPid(holderFile);
    if (holder === undefined || processAlive(holder))
      throw new DevLockHeldError(home, holder === undefined ? "a process that is starting" : `pid ${holder}`);
    // Its holder died without letting go (killed): the lock is taken over once stale, a few seconds from now.
    onWait?.(
      `the oz0 dev that ran here (pid ${holder}) died without letting go of ${home}; taking it over within ${STALE_MS / 1000} s`,
    );
    try {
      release = await lockfile.lock(target, {
        ...options,
        retries: { retries: Math.ceil((STALE_MS * 1.5) / 1_000), factor: 1, minTimeout: 1_000, maxTimeout: 1_000 },
      });
    } catch (retried) {
      if ((retried as NodeJS.ErrnoException).code !== "ELOCKED") throw retried;
      throw new DevLockHeldError(home, holderOf(holderFile));
    }
  }
  writeFileSync(holderFile, `${process.pid}\n`);
  return {
    async release() {
      rmSync(holderFile, { force: true });
      await release();
    },
  };
}

const STALE_MS = 10_000;

function holderOf(file: string): string {
  const pid = holderPid(file);
  return pid === undefined ? "a process that is starting" : `pid ${pid}`;
}

function holderPid(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
