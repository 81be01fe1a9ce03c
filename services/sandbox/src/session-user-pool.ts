// Unprivileged uids for the `user` isolation mode: each session's processes
// run under a uid (and the gid of the same number) of their own, taken from
// a configured range, with no /etc/passwd entry.
//
// A uid is held host-wide, not just in this process: several sandboxes (and
// test runs) on one host share the range, and two sessions must never share
// a uid. The hold is a lock on a file named for the uid, in a folder only the
// sandbox's uid enters (session-uid-locks.ts): exclusive, closed to every
// session, and dropped by the kernel when its holder dies, so a sandbox
// killed with SIGKILL leaves no stale hold. The folder belongs to a mount
// namespace: sandboxes in containers of their own hold apart unless they
// share it, and their sessions are apart anyway (own PID and mount namespaces).
//
// Before a uid is handed out its leftover processes (from a sandbox that was
// killed) are killed, and when its last session ends everything it still
// runs is killed, so a uid never carries one session's processes into another's.
import { randomInt } from "node:crypto";
import type { Logger } from "@oz0/serving";
import type { SessionUidRange } from "./sandbox-config.js";
import { SandboxError } from "./sandbox-errors.js";
import { DEFAULT_UID_LOCK_DIR, UidLocks } from "./session-uid-locks.js";
import { removeUidLeftovers, uidsWithSystemVObjects } from "./session-user-files.js";
import { killAllProcessesOf, uidsWithProcesses, type SessionUser } from "./session-user-processes.js";

/** The lock of `uid` a sandbox holds while it hands the uid out. */
function lockName(uid: number): string {
  return String(uid);
}

/**
 * The lock a session's keeper holds while its session runs under `uid` (bubblewrap run under session uids,
 * session-keeper.ts): the session outlives its sandbox, whose own lock dies with it, and no sandbox may hand the uid
 * out (or kill its processes as leftovers) meanwhile.
 */
function keptLockName(uid: number): string {
  return `${uid}-kept`;
}

/** One held uid and the sessions running under it (a session sharing another's working directory runs under its uid). */
class Holding {
  holders = 1;
  constructor(
    readonly user: SessionUser,
    readonly pool: SessionUserPool,
  ) {}
}

/** A session's claim on its uid. */
export class SessionUserLease implements SessionUser {
  readonly #holding: Holding;
  #released = false;

  constructor(holding: Holding) {
    this.#holding = holding;
  }

  get uid(): number {
    return this.#holding.user.uid;
  }

  get gid(): number {
    return this.#holding.user.gid;
  }

  /** The file a keeper locks for a session under this uid that may outlive the sandbox (session-keeper.ts). */
  get keptLockFile(): string {
    return this.#holding.pool.keptLockFile(this.uid);
  }

  /** Another claim on the same uid, for a session that works in this one's directory. Throws once every claim was released. */
  share(): SessionUserLease {
    if (this.#holding.holders === 0)
      throw new SandboxError("failed_precondition", `the session's uid ${this.uid} was already given back`);
    this.#holding.holders++;
    return new SessionUserLease(this.#holding);
  }

  /** Kills every process of the uid now, this session's and those of any session sharing it. Never rejects. */
  killAll(): Promise<void> {
    return this.#holding.pool.killAll(this.#holding.user);
  }

  /** Gives the claim back; the last one kills what the uid still runs and frees it. Idempotent; never rejects. */
  async release(): Promise<void> {
    if (this.#released) return;
    this.#released = true;
    const holding = this.#holding;
    if (--holding.holders > 0) return;
    await holding.pool.free(holding);
  }
}

/** How often, and how far apart, a taken-over session's uid is tried: another sandbox passing it over holds it for a bind and a close. */
const ADOPT_ATTEMPTS = 10;
const ADOPT_RETRY_MS = 20;
/** Between kills of a uid kept from the pools because its last kill failed. */
const QUARANTINE_RETRY_MS = 30_000;

export class SessionUserPool {
  /** The kills under way, by uid. */
  readonly #killing = new Map<number, Promise<void>>();
  /** Uids whose last kill left a process alive, or did not finish: never handed out until one succeeds. */
  readonly #unkillable = new Set<number>();
  readonly #killProcesses: (user: SessionUser) => Promise<Error | undefined>;
  readonly #quarantineRetryMs: number;
  readonly range: SessionUidRange;
  readonly #logger: Logger;
  /** Sessions under these uids run in PID namespaces of their own (bubblewrap), which end all they started. */
  readonly #contained: boolean;
  /** Uids this process holds, so it skips them without asking the kernel. */
  readonly #held = new Set<number>();
  /** The holdings of uids taken over with their sessions, for another session taken over under the same uid. */
  readonly #adopted = new Map<number, Holding>();
  /** Where the next search starts: uids go round the range, so a freed one is the last to be reused. */
  #cursor: number;
  readonly #locks: UidLocks;

  constructor(options: {
    range: SessionUidRange;
    logger: Logger;
    /**
     * Sessions under these uids run in PID namespaces of their own under keepers (bubblewrap run by root): a
     * session's keeper ends what its uid still runs before the session starts (session-keeper.ts), and once its
     * namespace is gone nothing of its uid runs. A uid is then taken and given back without a killer process of
     * the sandbox's, about 3 ms of its CPU each.
     */
    contained?: boolean;
    /** What kills every process of a uid; a test's stand-in. Default killAllProcessesOf. */
    killProcesses?: (user: SessionUser) => Promise<Error | undefined>;
    /** Between kills of a uid kept from the pools because its last kill failed; default 30 s. */
    quarantineRetryMs?: number;
    /**
     * The folder of the uids' locks, which every sandbox sharing the range must share (session-uid-locks.ts); made
     * when missing. Default DEFAULT_UID_LOCK_DIR.
     */
    lockDir?: string;
  }) {
    this.range = options.range;
    this.#logger = options.logger;
    this.#contained = options.contained === true;
    this.#killProcesses = options.killProcesses ?? killAllProcessesOf;
    this.#quarantineRetryMs = options.quarantineRetryMs ?? QUARANTINE_RETRY_MS;
    // Sandboxes starting together begin their searches apart.
    this.#cursor = randomInt(0, options.range.count);
    this.#locks = new UidLocks({ dir: options.lockDir ?? DEFAULT_UID_LOCK_DIR, logger: options.logger });
  }

  /** The file a keeper locks while a session under `uid` that may outlive the sandbox runs. */
  keptLockFile(uid: number): string {
    return this.#locks.file(keptLockName(uid));
  }

  /** Lets go of the uids' locks: for a sandbox whose sessions have ended (or are kept by their keepers). */
  close(): void {
    this.#locks.close();
  }

  /** @internal The pid of the helper that holds the pool's locks, for the test that kills it. */
  get lockHelperPid(): number | undefined {
    return this.#locks.helperPid;
  }

  /** A uid no other session on this host holds, its leftover processes killed. */
  async acquire(): Promise<SessionUserLease> {
    const { base, count } = this.range;
    for (let tried = 0; tried < count; tried++) {
      const uid = base + ((this.#cursor + tried) % count);
      if (this.#held.has(uid)) continue;
      // Not while a keeper holds it for a session that outlived its sandbox.
      if (!(await this.#locks.lock(lockName(uid), keptLockName(uid)))) continue;
      this.#cursor = (this.#cursor + tried + 1) % count;
      this.#held.add(uid);
      const user = { uid, gid: uid };
      const holding = new Holding(user, this);
      // What a killed sandbox's session of the uid left runs no more, nor lies where the next session would find it.
      if (!this.#contained && !(await this.#clean(user))) {
        this.#quarantine(holding);
        continue;
      }
      return new SessionUserLease(holding);
    }
    throw new SandboxError(
      "resource_exhausted",
      `every session uid from ${base} to ${base + count - 1} is in use on this host (OZ0_SANDBOX_UID_BASE, OZ0_SANDBOX_UID_COUNT); retry after a session ends, or widen the range`,
    );
  }

  /**
   * The uid of a session a previous run of the sandbox started, taken over with it (its keeper holds the uid
   * meanwhile). Held again by this process; tried a few times, since another sandbox may hold it for the moment
   * it takes to see the keeper's hold and pass it over. A session taken over that works in another's directory
   * runs under the same uid: its claim is another on the same holding.
   */
  async adopt(uid: number): Promise<SessionUserLease> {
    const adopted = this.#adopted.get(uid);
    if (adopted !== undefined && adopted.holders > 0) {
      adopted.holders++;
      return new SessionUserLease(adopted);
    }
    const { base, count } = this.range;
    if (!Number.isInteger(uid) || uid < base || uid >= base + count)
      throw new SandboxError(
        "failed_precondition",
        `the session's uid ${uid} is not in this sandbox's session uid range ${base}-${base + count - 1} (OZ0_SANDBOX_UID_BASE, OZ0_SANDBOX_UID_COUNT changed since it started)`,
      );
    let failure: unknown;
    for (let attempt = 0; attempt < ADOPT_ATTEMPTS; attempt++) {
      if (this.#held.has(uid)) break;
      failure = undefined;
      try {
        if (await this.#locks.lock(lockName(uid))) {
          this.#held.add(uid);
          const holding = new Holding({ uid, gid: uid }, this);
          this.#adopted.set(uid, holding);
          return new SessionUserLease(holding);
        }
      } catch (error) {
        // A lock helper that died meanwhile is started again by the next attempt.
        failure = error;
      }
      await new Promise((resolve) => setTimeout(resolve, ADOPT_RETRY_MS));
    }
    if (failure !== undefined && !this.#held.has(uid)) throw failure;
    throw new SandboxError("failed_precondition", `the session's uid ${uid} is held by another session`);
  }

  /**
   * Clears what a previous sandbox left under uids of the range (it was killed, and only the harnesses themselves
   * died with it): their processes, and, where sessions share the node's places (not under bubblewrap), their files
   * there and their System V IPC objects, which would hold memory and the node's few IPC ids until the uid is next
   * taken. Uids another live sandbox holds are left alone. Returns how many uids it cleared.
   */
  async clearLeftovers(): Promise<number> {
    let cleared = 0;
    const withProcesses = uidsWithProcesses(this.range);
    const withObjects = this.#contained ? new Set<number>() : uidsWithSystemVObjects(this.range);
    for (const uid of new Set([...withProcesses, ...withObjects])) {
      if (this.#held.has(uid)) continue;
      // Passed over: another sandbox's running session, or one that outlived its sandbox, under its keeper, which ended
      // what else the uid ran before it took the lock (and no session can take a lock: session-uid-locks.ts).
      if (!(await this.#locks.lock(lockName(uid), keptLockName(uid)))) continue;
      const user = { uid, gid: uid };
      if (this.#contained) await this.killAll(user);
      else await this.#clean(user);
      if (this.#unkillable.has(uid)) {
        this.#held.add(uid);
        this.#quarantine(new Holding(user, this));
        continue;
      }
      await this.#locks.unlock(lockName(uid));
      cleared++;
    }
    return cleared;
  }

  /**
   * @internal A call while one for the uid is under way shares it: the host's kill after the harness exited and the
   * session's own before it removes its files as the uid (session-user-files.ts) otherwise both run a killer, and
   * the later one could end the remover.
   */
  killAll(user: SessionUser): Promise<void> {
    let killing = this.#killing.get(user.uid);
    if (killing === undefined) {
      killing = (async () => {
        try {
          if (!(await this.#holdsForCertain(user))) return;
          const error = await this.#killProcesses(user);
          if (error === undefined) this.#unkillable.delete(user.uid);
          else {
            this.#unkillable.add(user.uid);
            this.#logger.error({ err: error, uid: user.uid }, "could not kill the processes of a session uid");
          }
        } finally {
          this.#killing.delete(user.uid);
        }
      })();
      this.#killing.set(user.uid, killing);
    }
    return killing;
  }

  /**
   * Kills what the uid runs, then removes what it left in the node's shared places (its files in /tmp, /var/tmp,
   * /dev/shm, its System V IPC objects): in the `user` mode a session shares them with the node, and what it left
   * would outlast it, in memory where /dev/shm is, and be the next session's of the uid to read.
   */
  async #clean(user: SessionUser): Promise<boolean> {
    // Nothing of a uid another sandbox may hold is this one's to kill or remove: done here.
    if (!(await this.#holdsForCertain(user))) return true;
    await this.killAll(user);
    // A process of the uid may still run: nothing is removed as the uid beside it, and the uid is not given out.
    if (this.#unkillable.has(user.uid)) return false;
    const left = await removeUidLeftovers(user);
    if (left !== undefined)
      this.#logger.warn({ uid: user.uid, left }, "could not remove all a session uid left in the node's shared places");
    return true;
  }

  /**
   * Keeps a uid whose processes could not all be killed held, out of every pool on the host (a process of it left
   * alive would share it with the next session, which could then ptrace or signal that one), killing again every
   * quarantineRetryMs until it works; a restart of the sandbox clears it at start-up.
   */
  #quarantine(holding: Holding): void {
    this.#logger.error(
      { uid: holding.user.uid, retryMs: this.#quarantineRetryMs },
      "a session uid's processes could not all be killed: the uid is kept from new sessions until they are",
    );
    setTimeout(() => {
      void (async () => {
        if (await this.#clean(holding.user)) await this.#letGo(holding);
        else this.#quarantine(holding);
      })();
    }, this.#quarantineRetryMs).unref();
  }

  /**
   * Whether this sandbox holds the uid for certain (session-uid-locks.ts: UidLocks.holds): what the uid runs and left
   * may be another sandbox's session's once its lock helper died and the uid was taken meanwhile (logged then).
   */
  async #holdsForCertain(user: SessionUser): Promise<boolean> {
    if (await this.#locks.holds(lockName(user.uid))) return true;
    this.#logger.warn(
      { uid: user.uid },
      "not killing or removing anything of a session uid this sandbox may no longer hold alone (its lock helper died)",
    );
    return false;
  }

  async #letGo(holding: Holding): Promise<void> {
    await this.#locks.unlock(lockName(holding.user.uid));
    this.#held.delete(holding.user.uid);
    if (this.#adopted.get(holding.user.uid) === holding) this.#adopted.delete(holding.user.uid);
  }

  /** @internal Called by the last lease of a holding. */
  async free(holding: Holding): Promise<void> {
    if (!this.#contained && !(await this.#clean(holding.user))) {
      this.#quarantine(holding);
      return;
    }
    await this.#letGo(holding);
  }
}
