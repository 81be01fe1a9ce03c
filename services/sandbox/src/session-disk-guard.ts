// What keeps sessions from filling the node's disk. Their directories lie on
// the sandbox root's filesystem, with the stack's own data when the two share
// one (the embedded stack keeps both in OZ0_HOME): a session writing without
// end would fill it, and with it the databases of the orchestrator, the LLM
// proxy and the events service. The kernel keeps no count a session's uid
// could be held to without filesystem support (project quotas, mounted so),
// so the guard watches the filesystem's free bytes and files (statfs, once a
// second) against two floors (OZ0_SANDBOX_MIN_FREE_BYTES, _FILES):
//
// - within twice a floor, it measures what each running session's
//   directories hold (GNU du, which walks without following links and stays
//   on the filesystem), the first measure of each being its baseline;
// - below a floor no session starts, and the session that grew the most since
//   its baseline is stopped at once, with any that grew since the check
//   before: a session that did not grow is never stopped, however much it
//   holds.
//
// What a session holds deleted (a file it deleted while open, and wrote on)
// counts with its directories (held-deleted-files.ts). Best effort: what a
// session writes between two checks lands, which is what the floor is for;
// a filesystem of the sessions' own is the bound no session can pass.
//
// Where the root may hold less than its filesystem has free (a Kubernetes
// emptyDir's sizeLimit, past which the kubelet evicts the pod and every
// session with it), OZ0_SANDBOX_DISK_LIMIT_BYTES says how much: what the
// root holds (du, the kubelet's own measure) counts against it, and the
// floor applies to what the limit leaves as to what the filesystem has. du
// of the whole root is slow where sessions hold many files, so it runs at
// most a twentieth of the time; in between, what the filesystem lost since
// counts as the root's (an overestimate where others write to it too), and
// only a fresh measure within twice the floor stops anyone.
import { execFile } from "node:child_process";
import { setPriority } from "node:os";
import { stat, statfs } from "node:fs/promises";
import type { Logger } from "@oz0/serving";
import type { GuardReadings } from "./guard-readings.js";
import { MAX_LOOKED_AT_PER_CHECK } from "./held-deleted-files.js";
import { PeriodicCheck } from "./periodic-check.js";
import { runningSessions, type SessionProcesses } from "./process-list.js";

/** Default of OZ0_SANDBOX_MIN_FREE_BYTES: 1 GiB, or a twentieth of the filesystem when that is less. */
export const DEFAULT_MIN_FREE_BYTES = 1024 * 1024 * 1024;
/** Default of OZ0_SANDBOX_MIN_FREE_FILES: 100,000 inodes, or a twentieth of the filesystem's when that is less. */
export const DEFAULT_MIN_FREE_FILES = 100_000;
/** A session that grew by less is not what fills the disk (its state file, a log line). */
const SLACK: Usage = { bytes: 1024 * 1024, files: 1000 };
/** At most this long for one measure of one session: a tree du cannot walk in it is left out of that check. */
const MEASURE_TIMEOUT_MS = 10_000;
/** At most this long for a measure of the whole root against its limit (OZ0_SANDBOX_DISK_LIMIT_BYTES). */
const ROOT_MEASURE_TIMEOUT_MS = 60_000;

/** What a session's directories take, or what a filesystem has free: bytes, and files (inodes). */
export interface Usage {
  bytes: number;
  files: number;
}

/** A session as the guard sees it. */
export interface GuardedSession {
  readonly id: string;
  readonly running: boolean;
  /** The directories it writes to on the node, its harness's output files among them. */
  readonly directories: readonly string[];
  /** How its processes are found, for the files they hold deleted; undefined: none are counted. */
  readonly processes?: SessionProcesses | undefined;
  /** Stops it at once, saying why. */
  stopForDisk(message: string): void;
}

export interface SessionDiskGuardOptions {
  /** The sandbox root: the filesystem the sessions' directories are on. */
  root: string;
  /**
   * Below this many free bytes (statfs's bavail, what an unprivileged user may still write), no session starts and
   * the growing ones stop; 0: no guard at all (files neither); undefined: DEFAULT_MIN_FREE_BYTES, or a twentieth of
   * the filesystem when that is less (a small disk is not held to a floor it could never keep).
   */
  minFreeBytes: number | undefined;
  /** The same for files (inodes: a session making millions of empty files fills a disk too); undefined: DEFAULT_MIN_FREE_FILES or a twentieth. */
  minFreeFiles?: number | undefined;
  /**
   * The most the root may hold (OZ0_SANDBOX_DISK_LIMIT_BYTES: a Kubernetes emptyDir's sizeLimit); undefined or 0: what
   * its filesystem has free is the only bound. With it the floors' defaults are a twentieth of the limit when that is less.
   */
  limitBytes?: number | undefined;
  /** Between checks. Default 1000 ms. */
  intervalMs?: number;
  sessions: () => Iterable<GuardedSession>;
  /** Where /proc is read for the files sessions hold deleted, off the event loop. */
  readings: GuardReadings;
  logger: Logger;
}

export class SessionDiskGuard {
  readonly #options: SessionDiskGuardOptions;
  /** Its checks; none when it is off. */
  readonly #checks: PeriodicCheck | undefined;
  /** The check made at construction: a start waits for it, so a node started on a full disk refuses its first session. */
  readonly #first: Promise<void>;
  /**
   * What statfs said last, or what the limit leaves when that is less (`underLimit`); undefined before, and after a
   * statfs that failed (no refusal on a guess).
   */
  #free: (Usage & { underLimit: boolean }) | undefined;
  /** The root's last measure against the limit: what it held, what the filesystem had free then. */
  #root: { used: number; fsFree: number } | undefined;
  /** The last try to measure the root, whether or not du gave a total: when, and how long it took. */
  #rootTried: { at: number; tookMs: number; failed: boolean } | undefined;
  readonly #floor: Usage;
  /** Each running session's first measure within twice the floor; emptied once there is room again. */
  readonly #baseline = new Map<string, Usage>();
  /** Each running session's measure at the check before. */
  readonly #previous = new Map<string, Usage>();
  #warned = false;

  constructor(options: SessionDiskGuardOptions) {
    this.#options = options;
    this.#floor = {
      bytes: options.minFreeBytes ?? DEFAULT_MIN_FREE_BYTES,
      files: options.minFreeFiles ?? DEFAULT_MIN_FREE_FILES,
    };
    if (!this.#off)
      this.#checks = new PeriodicCheck({
        intervalMs: options.intervalMs,
        check: () => this.#check(),
        onError: (error) => {
          this.#free = undefined;
          options.logger.warn({ err: error, root: options.root }, "cannot read the free space of the sessions' disk");
        },
      });
    this.#first = this.check();
  }

  get #off(): boolean {
    return this.#options.minFreeBytes === 0;
  }

  /** Whether the disk is below a floor now: sessions ending meanwhile keep no snapshot of their work (sandbox-session.ts). */
  get belowFloor(): boolean {
    return this.#shortfall(1) !== undefined;
  }

  /** What falls short of the floors times `times`, if anything, as the refusals and stops name it. */
  #shortfall(times: number): string | undefined {
    const free = this.#free;
    if (free === undefined) return undefined;
    if (free.bytes < this.#floor.bytes * times)
      return free.underLimit
        ? `this sandbox's disk limit of ${mebibytes(this.#options.limitBytes!)} (OZ0_SANDBOX_DISK_LIMIT_BYTES) leaves ${mebibytes(free.bytes)} free, below its floor of ${mebibytes(this.#floor.bytes)} (OZ0_SANDBOX_MIN_FREE_BYTES)`
        : `this node's disk has ${mebibytes(free.bytes)} free, below its floor of ${mebibytes(this.#floor.bytes)} (OZ0_SANDBOX_MIN_FREE_BYTES)`;
    if (free.files < this.#floor.files * times)
      return `this node's disk has room for ${free.files} more files, below its floor of ${this.#floor.files} (OZ0_SANDBOX_MIN_FREE_FILES)`;
    return undefined;
  }

  /** Why no session may start now; undefined when there is room (or no guard). */
  async refusal(): Promise<string | undefined> {
    await this.#first;
    if (this.#shortfall(1) === undefined) return undefined;
    // The last measure may predate a session that ended since and gave its room back: measured again, after any check
    // under way (begun, maybe, before that), so a start is refused on the disk as it is.
    await this.#checks?.fresh();
    const shortfall = this.#shortfall(1);
    if (shortfall === undefined) return undefined;
    return `${shortfall}: no session starts until there is room; start it on another node, or free the disk of ${this.#options.root}`;
  }

  /** One check (the timer's), or the one under way. Never throws: a filesystem it cannot read is logged, and refuses nothing. */
  check(): Promise<void> {
    return this.#checks?.run() ?? Promise.resolve();
  }

  async #check(): Promise<void> {
    const fs = await statfs(this.#options.root);
    const limit = this.#options.limitBytes || undefined;
    // Defaults shrink to a twentieth of a small filesystem (or limit); one that counts no inodes (btrfs says 0) has no
    // file floor.
    if (this.#options.minFreeBytes === undefined)
      this.#floor.bytes = Math.min(
        DEFAULT_MIN_FREE_BYTES,
        Math.floor(Math.min(fs.blocks * fs.bsize, limit ?? Infinity) / 20),
      );
    if (this.#options.minFreeFiles === undefined)
      this.#floor.files = Math.min(DEFAULT_MIN_FREE_FILES, Math.floor(fs.files / 20));
    const fsFree = fs.bavail * fs.bsize;
    const limitFree = limit === undefined ? Infinity : await this.#leftUnderLimit(limit, fsFree);
    this.#free = {
      bytes: Math.min(fsFree, limitFree),
      files: fs.files === 0 ? Infinity : fs.ffree,
      underLimit: limitFree < fsFree,
    };
    if (this.#shortfall(2) === undefined) {
      if (this.#warned) this.#options.logger.info({ free: this.#free }, "the node's disk has room again");
      this.#warned = false;
      this.#baseline.clear();
      this.#previous.clear();
      return;
    }
    // Within twice a floor: what each session holds, against its baseline.
    const running = [...this.#options.sessions()].filter((session) => session.running);
    const held = await this.#options.readings.heldDeletedFiles({
      device: (await stat(this.#options.root)).dev,
      sessions: runningSessions(running).finders,
      budget: MAX_LOOKED_AT_PER_CHECK,
    });
    const growth = new Map<
      GuardedSession,
      { sinceBaseline: Usage; sincePrevious: Usage; now: Usage; inDirectories: Usage; deleted: Usage }
    >();
    for (const session of running) {
      const inDirectories = await directoryUsage(session.directories);
      if (inDirectories === undefined) continue;
      const deleted = held.get(session.id) ?? { bytes: 0, files: 0 };
      const now = { bytes: inDirectories.bytes + deleted.bytes, files: inDirectories.files + deleted.files };
      if (!this.#baseline.has(session.id)) this.#baseline.set(session.id, now);
      const baseline = this.#baseline.get(session.id)!;
      const previous = this.#previous.get(session.id) ?? now;
      this.#previous.set(session.id, now);
      growth.set(session, {
        sinceBaseline: minus(now, baseline),
        sincePrevious: minus(now, previous),
        now,
        inDirectories,
        deleted,
      });
    }
    const ids = new Set(running.map((session) => session.id));
    for (const id of [...this.#baseline.keys()]) if (!ids.has(id)) this.#baseline.delete(id);
    for (const id of [...this.#previous.keys()]) if (!ids.has(id)) this.#previous.delete(id);

    const shortfall = this.#shortfall(1);
    if (shortfall === undefined) return;
    if (!this.#warned)
      this.#options.logger.warn(
        { free: this.#free, floor: this.#floor, root: this.#options.root },
        "the node's disk is below its floor: no session starts, and the sessions that fill it are stopped",
      );
    this.#warned = true;
    // What is short is what the sessions are compared by.
    const short: keyof Usage = this.#free!.bytes < this.#floor.bytes ? "bytes" : "files";
    const grew = (usage: Usage): boolean => usage.bytes > SLACK.bytes || usage.files > SLACK.files;
    const most = [...growth]
      .filter(([, g]) => grew(g.sinceBaseline))
      .sort((a, b) => b[1].sinceBaseline[short] - a[1].sinceBaseline[short])[0]?.[0];
    const stop = new Set([...growth].filter(([, g]) => grew(g.sincePrevious)).map(([session]) => session));
    if (most !== undefined) stop.add(most);
    for (const session of stop) {
      const { now, inDirectories, deleted } = growth.get(session)!;
      this.#options.logger.warn({ sessionId: session.id, ...now }, "session stopped: it was filling the node's disk");
      const heldDeleted =
        deleted.files > 0
          ? `, and files it deleted but still holds ${mebibytes(deleted.bytes)} in ${deleted.files}`
          : "";
      try {
        session.stopForDisk(
          `${shortfall} while this session was writing to it (its directories hold ${mebibytes(inDirectories.bytes)} in ${inDirectories.files} files${heldDeleted}); the session was stopped`,
        );
      } catch (error) {
        this.#options.logger.error({ err: error, sessionId: session.id }, "could not stop a session filling the disk");
      }
    }
  }

  /**
   * What the limit leaves: measured afresh (du of the root) at the first check, within twice the floor, and when the
   * last try is older than twenty times what it took (du at most a twentieth of the time); otherwise the last
   * measure, less what the filesystem lost since. A du that gives no total in time is tried again as late as one
   * that did (the root not measured meanwhile: until a first measure, the limit is not kept), with a warning.
   */
  async #leftUnderLimit(limit: number, fsFree: number): Promise<number> {
    const last = this.#root;
    const estimate = last === undefined ? limit : limit - last.used - Math.max(0, last.fsFree - fsFree);
    const tried = this.#rootTried;
    const spaced =
      tried === undefined || Date.now() - tried.at >= Math.max(this.#options.intervalMs ?? 1000, 20 * tried.tookMs);
    const due = spaced || (estimate < this.#floor.bytes * 2 && tried?.failed === false);
    if (!due) return estimate;
    const started = Date.now();
    const used = (await directoryUsage([this.#options.root], { timeoutMs: ROOT_MEASURE_TIMEOUT_MS }))?.bytes;
    this.#rootTried = { at: Date.now(), tookMs: Date.now() - started, failed: used === undefined };
    if (used === undefined) {
      this.#options.logger.warn(
        { root: this.#options.root, limitBytes: limit, tookMs: this.#rootTried.tookMs },
        "could not measure what the sandbox root holds against its limit (OZ0_SANDBOX_DISK_LIMIT_BYTES): du gave no total in time; trying again later",
      );
      return estimate;
    }
    this.#root = { used, fsFree };
    return limit - used;
  }

  close(): void {
    this.#checks?.close();
  }
}

function minus(a: Usage, b: Usage): Usage {
  return { bytes: a.bytes - b.bytes, files: a.files - b.files };
}

/** A size as the guards' messages give it. */
export function mebibytes(bytes: number): string {
  return `${(bytes / (1024 * 1024)).toFixed(1)} MiB`;
}

/**
 * What the files beneath `directories` take on the disk (allocated bytes, and inodes, each once), by GNU du: it
 * walks relative to open folders without following links (a session swapping a folder for a link mid-walk leads
 * it nowhere), any depth, and stays on the filesystem (-x). Undefined when du failed to give a total in time;
 * folders it cannot read (gone, or closed to the sandbox) count what it could see.
 */
export async function directoryUsage(
  directories: readonly string[],
  options: { timeoutMs?: number } = {},
): Promise<Usage | undefined> {
  const timeoutMs = options.timeoutMs ?? MEASURE_TIMEOUT_MS;
  const [bytes, files] = await Promise.all([
    duTotal(["-s", "-x", "-B1", "--total", "--", ...directories], timeoutMs),
    duTotal(["-s", "-x", "--inodes", "--total", "--", ...directories], timeoutMs),
  ]);
  return bytes !== undefined && files !== undefined ? { bytes, files } : undefined;
}

function duTotal(args: readonly string[], timeoutMs: number): Promise<number | undefined> {
  return new Promise((resolve) => {
    const du = execFile(
      "du",
      args,
      { timeout: timeoutMs, killSignal: "SIGKILL", env: { PATH: "/usr/bin:/bin", LC_ALL: "C" } },
      (error, stdout) => {
        // An unreadable folder makes du exit 1 with its total still printed; a kill by the timeout prints none.
        const total = /^(\d+)\ttotal$/m.exec(stdout)?.[1];
        resolve(total !== undefined && (error === null || error.code === 1) ? Number(total) : undefined);
      },
    );
    // A walk of many files is background work: it yields the CPU to the sandbox and the sessions' own work.
    if (du.pid !== undefined)
      try {
        setPriority(du.pid, 10);
      } catch {
        // already done
      }
  });
}
