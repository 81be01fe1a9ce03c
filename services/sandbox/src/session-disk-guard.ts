// What keeps sessions from filling the node's disk. Their directories lie on
// the sandbox root's filesystem, with the stack's own data when the two share
// one (the embedded stack keeps both in OZ0_HOME): a session writing without
// end would fill it, and with it the databases of the orchestrator, the LLM
// proxy and the events service. The kernel keeps no count a session's uid
// could be held to without filesystem support (project quotas, mounted so),
// so the guard watches the filesystem's free space and files (statfs, once a
// second). Below a floor (OZ0_SANDBOX_MIN_FREE_BYTES, _FILES) no session starts, and the
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
/** Default of OZ0_SANDBOX_MIN_FREE_FILES: 100,000 inodes, or a twentieth of the filesystem's when that is less. */
export const DEFAULT_MIN_FREE_FILES = 100_000;
/** A session that grew by less between two checks is not what fills the disk (its state file, a log line). */
const SLACK: Usage = { bytes: 1024 * 1024, files: 1000 };

/** What a session's directories take, or what a filesystem has free: bytes, and files (inodes). */
export interface Usage {
  bytes: number;
  files: number;
}

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
  /** The same for files (inodes: a session making millions of empty files fills a disk too); undefined: DEFAULT_MIN_FREE_FILES or a twentieth. */
  minFreeFiles?: number | undefined;
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
  #free: Usage | undefined;
  readonly #floor: Usage;
  /** Each running session's usage at the last check below the floor; empty while there is room. */
  readonly #measured = new Map<string, Usage>();

  constructor(options: SessionDiskGuardOptions) {
    this.#options = options;
    this.#floor = {
      bytes: options.minFreeBytes ?? DEFAULT_MIN_FREE_BYTES,
      files: options.minFreeFiles ?? DEFAULT_MIN_FREE_FILES,
    };
    this.#first = this.check();
    if (this.#off) return;
    this.#timer = setInterval(() => void this.check(), options.intervalMs ?? 1000);
    this.#timer.unref();
  }

  get #off(): boolean {
    return this.#options.minFreeBytes === 0;
  }

  /** What falls short of the floor now, if anything: what the refusals and stops name. */
  #shortfall(): string | undefined {
    const free = this.#free;
    if (free === undefined) return undefined;
    if (free.bytes < this.#floor.bytes)
      return `this node's disk has ${mebibytes(free.bytes)} free, below its floor of ${mebibytes(this.#floor.bytes)} (OZ0_SANDBOX_MIN_FREE_BYTES)`;
    if (free.files < this.#floor.files)
      return `this node's disk has room for ${free.files} more files, below its floor of ${this.#floor.files} (OZ0_SANDBOX_MIN_FREE_FILES)`;
    return undefined;
  }

  /** Why no session may start now; undefined when there is room (or no guard). */
  async refusal(): Promise<string | undefined> {
    await this.#first;
    const shortfall = this.#shortfall();
    if (shortfall === undefined) return undefined;
    return `${shortfall}: no session starts until there is room; start it on another node, or free the disk of ${this.#options.root}`;
  }

  /** One check (the timer's; also called by tests). Never throws: a filesystem it cannot read is logged. */
  async check(): Promise<void> {
    if (this.#checking || this.#off) return;
    this.#checking = true;
    try {
      const fs = await statfs(this.#options.root);
      // Defaults shrink to a twentieth of a small filesystem; one that counts no inodes (btrfs says 0) has no file floor.
      if (this.#options.minFreeBytes === undefined)
        this.#floor.bytes = Math.min(DEFAULT_MIN_FREE_BYTES, Math.floor((fs.blocks * fs.bsize) / 20));
      if (this.#options.minFreeFiles === undefined)
        this.#floor.files = Math.min(DEFAULT_MIN_FREE_FILES, Math.floor(fs.files / 20));
      const wasBelow = this.#shortfall() !== undefined;
      this.#free = { bytes: fs.bavail * fs.bsize, files: fs.files === 0 ? Infinity : fs.ffree };
      const shortfall = this.#shortfall();
      if (shortfall === undefined) {
        if (wasBelow) this.#options.logger.info({ free: this.#free }, "the node's disk has room again");
        this.#measured.clear();
        return;
      }
      await this.#stopGrowing(shortfall, wasBelow);
    } catch (error) {
      this.#options.logger.warn(
        { err: error, root: this.#options.root },
        "cannot read the free space of the sessions' disk",
      );
    } finally {
      this.#checking = false;
    }
  }

  async #stopGrowing(shortfall: string, wasBelow: boolean): Promise<void> {
    const running = [...this.#options.sessions()].filter((session) => session.running);
    const usages = new Map<GuardedSession, Usage>();
    for (const session of running) usages.set(session, await directoryUsage(session.directories));
    // What is short: what the sessions are compared by.
    const short: keyof Usage = this.#free!.bytes < this.#floor.bytes ? "bytes" : "files";
    let stop: GuardedSession[];
    if (!wasBelow || this.#measured.size === 0) {
      // Just crossed: the one holding the most, when it holds more than the slack (else none of them is the cause).
      const largest = [...usages].sort((a, b) => b[1][short] - a[1][short])[0];
      stop = largest !== undefined && largest[1][short] > SLACK[short] ? [largest[0]] : [];
      this.#options.logger.warn(
        { free: this.#free, floor: this.#floor, root: this.#options.root },
        "the node's disk is below its floor: no session starts, and the sessions that fill it are stopped",
      );
    } else {
      stop = [...usages]
        .filter(([session, usage]) => {
          const before = this.#measured.get(session.id) ?? { bytes: 0, files: 0 };
          return usage.bytes - before.bytes > SLACK.bytes || usage.files - before.files > SLACK.files;
        })
        .map(([session]) => session);
    }
    this.#measured.clear();
    for (const [session, usage] of usages) this.#measured.set(session.id, usage);
    for (const session of stop) {
      const usage = usages.get(session) ?? { bytes: 0, files: 0 };
      this.#options.logger.warn({ sessionId: session.id, ...usage }, "session stopped: it was filling the node's disk");
      session.stopForDisk(
        `${shortfall} while this session was writing to it (its directories hold ${mebibytes(usage.bytes)} in ${usage.files} files); the session was stopped`,
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

/** What the files beneath `directories` take: allocated blocks and inodes, each inode once; what cannot be read counts nothing. */
export async function directoryUsage(directories: readonly string[]): Promise<Usage> {
  const seen = new Set<string>();
  let bytes = 0;
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
        bytes += stat.blocks * 512;
        if (entry.isDirectory()) pending.push(file);
      } catch {
        // Removed meanwhile.
      }
    }
  }
  return { bytes, files: seen.size };
}
