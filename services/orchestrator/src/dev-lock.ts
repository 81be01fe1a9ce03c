// One `oz0 dev` per data directory. Two stacks on one OZ0_HOME share its
// stores but not their sessions: an approval taken by one never reaches a
// session of the other, and the job hangs. The lock is taken atomically
// (proper-lockfile: a directory made with mkdir, kept fresh while held, and
// taken over once stale, so a killed `oz0 dev` does not block the next one);
// the holder's pid is written beside it so the loser can say who holds it.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import lockfile from "proper-lockfile";

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
export async function takeDevLock(home: string): Promise<DevLock> {
  mkdirSync(home, { recursive: true });
  const target = path.join(home, "dev");
  const holderFile = path.join(home, "dev.pid");
  let release: () => Promise<void>;
  try {
    // realpath: false locks the path itself (the target file need not exist); stale after 10 s without a refresh.
    release = await lockfile.lock(target, { realpath: false, stale: 10_000, update: 2_000, lockfilePath: `${target}.lock` });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ELOCKED") throw error;
    throw new DevLockHeldError(home, holderOf(holderFile));
  }
  writeFileSync(holderFile, `${process.pid}\n`);
  return {
    async release() {
      rmSync(holderFile, { force: true });
      await release();
    },
  };
}

function holderOf(file: string): string {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(pid) && pid > 0 ? `pid ${pid}` : "a process that is starting";
  } catch {
    return "a process that is starting";
  }
}
