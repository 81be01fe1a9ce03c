// What keeps sessions from filling the node's disk. Their directories lie on
// the sandbox root's filesystem, with the stack's own data when the two share
// one (the embedded stack keeps both in OZ0_HOME): a session writing without
// end would fill it, and with it the databases of the orchestrator, the LLM
// proxy and the events service. The kernel keeps no count a session's uid
// could be held to without filesystem support (project quotas, mounted so),
// so the guard watches the filesystem's free space (statfs, once a second).
// Below the floor (OZ0_SANDBOX_MIN_FREE_BYTES) no session starts, and the
// sessions that fill it are stopped at once: at the first check below it the
// one holding the most, then any that grew since the check before. Best
// effort: what a session writes between two checks lands, which is what the
// floor is for; a filesystem of the sessions' own (a volume for the sandbox
// root) is the bound no session can pass.
import { lstat, opendir, statfs } from "node:fs/promises";
import path from "node:path";
import type { Logger } from "pino";

/** Default of OZ0_SANDBOX_MIN_FREE_BYTES: 1 GiB, or a twentieth of the filesystem when that is less. */
export const DEFAULT_MIN_FREE_BYTES = 1024 * 1024 * 1024;
/** A session that grew by less between two checks is not what fills the disk (its state file, a log line). */
const GROWTH_SLACK_BYTES = 1024 * 1024;

/** A session as the guard sees it. */
export interface GuardedSession {
  readonly id: string;
  readonly running: boolean;
  /** The directories it writes to on the node. */
  readonly directories: readonly string[];
  /** Stops it at once, saying why. */
  stopForDisk(message: string): void;
}

export interface SessionDiskGuardOptions {
  /** The sandbox root: the filesystem the sessions' directories are on. */
  root: string;
  /**
   * Below this many free bytes (statfs's bavail, what an unprivileged user may still write), no session starts and
   * the growing ones stop; 0: no guard; undefined: DEFAULT_MIN_FREE_BYTES, or a twentieth of the filesystem when
   * that is less (a small disk is not held to a floor it could never keep).
   */
  minFreeBytes: number | undefined;
  /** Between checks. Default 1000 ms. */
  intervalMs?: number;
  sessions: () => Iterable<GuardedSession>;
  logger: Logger;
}

export class SessionDiskGuard {
  readonly #options: SessionDiskGuardOptions;
  readonly #timer: NodeJS.Timeout | undefined;
  /** The check made at construction: a start waits for it, so a node started on a full disk refuses its first session. */
  readonly #first: Promise<void>;
  #checking = false;
  #free: number | undefined;
  #floor: number;
  /** Each running session's bytes at the last check below the floor; empty while there is room. */
  readonly #measured = new Map<string, number>();

  constructor(options: SessionDiskGuardOptions) {
    this.#options = options;
    this.#floor = options.minFreeBytes ?? DEFAULT_MIN_FREE_BYTES;
    this.#first = this.check();
    if (this.#floor <= 0) return;
    this.#timer = setInterval(() => void this.check(), options.intervalMs ?? 1000);
    this.#timer.unref();
  }

  /** The floor in bytes (by default, once the filesystem's size is known, a twentieth of it when that is less). */
  get floor(): number {
    return this.#floor;
  }

  /** Why no session may start now; undefined when there is room (or no guard). */
  async refusal(): Promise<string | undefined> {
    await this.#first;
    if (this.#free === undefined || this.#free >= this.#floor) return undefined;
    return `this node's disk has ${mebibytes(this.#free)} free, below its floor of ${mebibytes(this.#floor)} (OZ0_SANDBOX_MIN_FREE_BYTES): no session starts until there is room; start it on another node, or free the disk of ${this.#options.root}`;
  }

  /** One check (the timer's; also called by tests). Never throws: a filesystem it cannot read is logged. */
  async check(): Promise<void> {
    if (this.#checking || this.#floor <= 0) return;
    this.#checking = true;
    try {
      const fs = await statfs(this.#options.root);
      if (this.#options.minFreeBytes === undefined)
        this.#floor = Math.min(DEFAULT_MIN_FREE_BYTES, Math.floor((fs.blocks * fs.bsize) / 20));
      const wasBelow = this.#free !== undefined && this.#free < this.#floor;
      this.#free = fs.bavail * fs.bsize;
      if (this.#free >= this.#floor) {
        if (wasBelow) this.#options.logger.info({ freeBytes: this.#free }, "the node's disk has room again");
        this.#measured.clear();
        return;
      }
      await this.#stopGrowing(wasBelow);
    } catch (error) {
      this.#options.logger.warn(
        { err: error, root: this.#options.root },
        "cannot read the free space of the sessions' disk",
      );
    } finally {
      this.#checking = false;
    }
  }

  async #stopGrowing(wasBelow: boolean): Promise<void> {
    const running = [...this.#options.sessions()].filter((session) => session.running);
    const sizes = new Map<GuardedSession, number>();
    for (const session of running) sizes.set(session, await directoryBytes(session.directories));
    let stop: GuardedSession[];
    if (!wasBelow || this.#measured.size === 0) {
      // Just crossed: the one holding the most, when it holds more than the slack (else none of them is the cause).
      const largest = [...sizes].sort((a, b) => b[1] - a[1])[0];
      stop = largest !== undefined && largest[1] > GROWTH_SLACK_BYTES ? [largest[0]] : [];
      this.#options.logger.warn(
        { freeBytes: this.#free, floorBytes: this.#floor, root: this.#options.root },
        "the node's disk is below its floor: no session starts, and the sessions that fill it are stopped",
      );
    } else {
      stop = [...sizes]
        .filter(([session, bytes]) => bytes - (this.#measured.get(session.id) ?? 0) > GROWTH_SLACK_BYTES)
        .map(([session]) => session);
    }
    this.#measured.clear();
    for (const [session, bytes] of sizes) this.#measured.set(session.id, bytes);
    for (const session of stop) {
      const bytes = sizes.get(session) ?? 0;
      this.#options.logger.warn({ sessionId: session.id, bytes }, "session stopped: it was filling the node's disk");
      session.stopForDisk(
        `the node's disk fell below its floor of ${mebibytes(this.#floor)} free (OZ0_SANDBOX_MIN_FREE_BYTES) while this session was writing to it (its directories hold ${mebibytes(bytes)}); the session was stopped`,
      );
    }
  }

  close(): void {
    clearInterval(this.#timer);
  }
}

function mebibytes(bytes: number): string {
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/** The disk the files beneath `directories` take (allocated blocks, each inode once); what cannot be read counts nothing. */
export async function directoryBytes(directories: readonly string[]): Promise<number> {
  const seen = new Set<string>();
  let total = 0;
  const pending = [...directories];
  for (let dir = pending.pop(); dir !== undefined; dir = pending.pop()) {
    let entries;
    try {
      entries = await opendir(dir);
    } catch {
      continue; // gone, or closed to the sandbox: nothing to count
    }
    for await (const entry of entries) {
      const file = path.join(dir, entry.name);
      try {
        const stat = await lstat(file);
        const inode = `${stat.dev}:${stat.ino}`;
        if (seen.has(inode)) continue;
        seen.add(inode);
        total += stat.blocks * 512;
        if (entry.isDirectory()) pending.push(file);
      } catch {
        // Removed meanwhile.
      }
    }
  }
  return total;
}
