// Unprivileged uids for the `user` isolation mode: each session's processes
// run under a uid (and the gid of the same number) of their own, taken from
// a configured range, with no /etc/passwd entry.
//
// A uid is held host-wide, not just in this process: several sandboxes (and
// test runs) on one host share the range, and two sessions must never share
// a uid. The hold is an abstract Unix socket named for the uid: binding it
// is exclusive, and the kernel drops it when its holder dies, so a sandbox
// killed with SIGKILL leaves no stale hold. Abstract sockets belong to a
// network namespace; sandboxes in separate containers hold separately, and
// their sessions are apart anyway (own PID and mount namespaces).
//
// Before a uid is handed out its leftover processes (from a sandbox that was
// killed) are killed, and when its last session ends everything it still
// runs is killed, so a uid never carries one session's processes into another's.
import { spawnSync } from "node:child_process";
import { randomInt } from "node:crypto";
import { readFileSync } from "node:fs";
import net from "node:net";
import type { Logger } from "@oz0/serving";
import type { SessionUidRange } from "./sandbox-config.js";
import { SandboxError } from "./sandbox-errors.js";
import { removeUidLeftovers, uidsWithSystemVObjects } from "./session-user-files.js";
import { killAllProcessesOf, uidsWithProcesses, type SessionUser } from "./session-user-processes.js";
import { systemCommand } from "./system-command.js";

function holdName(uid: number): string {
  return `\0oz0-sandbox-session-uid-${uid}`;
}

/**
 * The name a session's keeper binds while its session runs under `uid` (bubblewrap run under session uids,
 * session-keeper.ts): the session outlives its sandbox, whose own hold dies with it, and no sandbox may hand the
 * uid out (or kill its processes as leftovers) meanwhile. Without the leading NUL, which the keeper adds.
 */
export function keptHoldName(uid: number): string {
  return `oz0-sandbox-session-uid-${uid}-kept`;
}

/** Whether a session's keeper holds `uid` (its session outlived the sandbox that started it). */
async function keptByKeeper(uid: number): Promise<boolean> {
  const server = await tryHold(uid, `\0${keptHoldName(uid)}`);
  if (server === undefined) return true;
  await closeHold(server);
  return false;
}

/** Binds the uid's hold (or `name`); undefined when another holder (this process or another) has it. */
function tryHold(uid: number, name = holdName(uid)): Promise<net.Server | undefined> {
  return new Promise((resolve) => {
    const server = net.createServer((socket) => socket.destroy());
    server.once("error", () => resolve(undefined));
    server.listen(name, () => {
      // A hold must not keep the sandbox's event loop alive by itself.
      server.unref();
      resolve(server);
    });
  });
}

/**
 * Perl connects to each abstract name given and prints "<name> <pid> <uid>" of the process that listens on it
 * (SO_PEERCRED: the listener's credentials, whoever now holds its descriptor), or "<name> none" when nothing
 * listens (refused: bound without listening, or free) or its backlog is full (a sandbox's hold accepts at once; a
 * listener that never accepts would otherwise hold the connect, and the sandbox's start, until the timeout). Node
 * cannot read SO_PEERCRED. SOL_SOCKET 1, SO_PEERCRED 17, F_SETFL 4 and O_NONBLOCK 04000 are x86-64's and arm64's;
 * struct ucred is { pid_t, uid_t, gid_t }.
 */
const HOLD_LISTENERS = String.raw`
for my $name (@ARGV) {
  socket(my $s, 1, 1, 0) or die "socket: $!";
  fcntl($s, 4, 04000) or die "fcntl: $!";
  if (!connect($s, pack("S a*", 1, "\0$name"))) { print "$name none\n"; next }
  my ($pid, $uid) = unpack("lL", getsockopt($s, 1, 17) // "");
  print defined $uid ? "$name $pid $uid\n" : "$name none\n";
  close $s;
}
`;

/**
 * Who listens on `uid`'s hold, which another holds: `{ pid, uid }`, or "none" when it is bound and nobody listens
 * (every sandbox's hold listens), or undefined where it cannot be told (no perl; another architecture).
 */
function holdListener(uid: number): { pid: number; uid: number } | "none" | undefined {
  const perl = systemCommand("perl");
  if (perl === undefined || (process.arch !== "x64" && process.arch !== "arm64")) return undefined;
  const name = holdName(uid).slice(1);
  const run = spawnSync(perl, ["-e", HOLD_LISTENERS, name], { encoding: "utf8", timeout: 10_000 });
  const [, pid, listenerUid] = new RegExp(`^${name} (\\d+|none)(?: (\\d+))?$`, "m").exec(run.stdout ?? "") ?? [];
  if (pid === undefined) return undefined;
  return pid === "none" ? "none" : { pid: Number(pid), uid: Number(listenerUid) };
}

/** The real uid `pid` runs under now; undefined when it is gone. */
function uidOf(pid: number): number | undefined {
  try {
    const uid = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
    return uid === undefined ? undefined : Number(uid);
  } catch {
    return undefined;
  }
}

function closeHold(server: net.Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** One held uid and the sessions running under it (a session sharing another's working directory runs under its uid). */
class Holding {
  holders = 1;
  constructor(
    readonly user: SessionUser,
    readonly server: net.Server,
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
  }) {
    this.range = options.range;
    this.#logger = options.logger;
    this.#contained = options.contained === true;
    this.#killProcesses = options.killProcesses ?? killAllProcessesOf;
    this.#quarantineRetryMs = options.quarantineRetryMs ?? QUARANTINE_RETRY_MS;
    // Sandboxes starting together begin their searches apart.
    this.#cursor = randomInt(0, options.range.count);
  }

  /** A uid no other session on this host holds, its leftover processes killed. */
  async acquire(): Promise<SessionUserLease> {
    const { base, count } = this.range;
    for (let tried = 0; tried < count; tried++) {
      const uid = base + ((this.#cursor + tried) % count);
      if (this.#held.has(uid)) continue;
      const server = await tryHold(uid);
      if (server === undefined) continue;
      if (await keptByKeeper(uid)) {
        await closeHold(server);
        continue;
      }
      this.#cursor = (this.#cursor + tried + 1) % count;
      this.#held.add(uid);
      const user = { uid, gid: uid };
      const holding = new Holding(user, server, this);
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
    for (let attempt = 0; attempt < ADOPT_ATTEMPTS; attempt++) {
      if (this.#held.has(uid)) break;
      const server = await tryHold(uid);
      if (server !== undefined) {
        this.#held.add(uid);
        const holding = new Holding({ uid, gid: uid }, server, this);
        this.#adopted.set(uid, holding);
        return new SessionUserLease(holding);
      }
      await new Promise((resolve) => setTimeout(resolve, ADOPT_RETRY_MS));
    }
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
    for (const uid of new Set([...withProcesses.keys(), ...withObjects])) {
      if (this.#held.has(uid)) continue;
      const server = (await tryHold(uid)) ?? (await this.#takeBackFromSession(uid));
      if (server === undefined) continue; // another sandbox's running session
      // A session that outlived its sandbox, under its keeper: its processes are all in its own PID namespace. One of
      // the uid's in this namespace is not a kept session's, whoever holds the name (a user-mode session can bind it).
      // A uid that runs nothing is no kept session's, whoever holds the name.
      const processes = withProcesses.get(uid);
      if (processes !== undefined && !processes.inOwnPidNamespace && (await keptByKeeper(uid))) {
        await closeHold(server);
        continue;
      }
      const user = { uid, gid: uid };
      if (this.#contained) await this.killAll(user);
      else await this.#clean(user);
      if (this.#unkillable.has(uid)) {
        this.#held.add(uid);
        this.#quarantine(new Holding(user, server, this));
        continue;
      }
      await closeHold(server);
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

  async #letGo(holding: Holding): Promise<void> {
    await closeHold(holding.server);
    this.#held.delete(holding.user.uid);
    if (this.#adopted.get(holding.user.uid) === holding) this.#adopted.delete(holding.user.uid);
  }

  /**
   * The hold of `uid`, when a session's process took it rather than a sandbox: a process that outlived its killed
   * sandbox can bind its own uid's name (any abstract name is open to it), and would then be passed over as another
   * sandbox's running session by every start after, alive for good. A hold whose listener runs under a uid of the
   * range, or that nobody listens on (twice, 50 ms apart: a sandbox binds and listens at once), is a session's: the
   * listener and the uid's processes are killed, and the hold taken. Undefined: a sandbox holds it (or, after
   * that, it could not be taken: logged).
   */
  async #takeBackFromSession(uid: number): Promise<net.Server | undefined> {
    const { base, count } = this.range;
    const inRange = (id: number): boolean => id >= base && id < base + count;
    let listener = holdListener(uid);
    if (listener === "none") {
      await new Promise((resolve) => setTimeout(resolve, 50));
      listener = holdListener(uid);
    }
    if (listener === undefined || (listener !== "none" && !inRange(listener.uid))) return undefined;
    this.#logger.warn(
      { uid, holder: listener === "none" ? "bound, not listening" : listener },
      "a session's process held its uid's hold, to outlive its sandbox: killing it and the uid's processes",
    );
    // The listener's pid is as it was at listen(): killed only while a process of that uid still has it.
    if (listener !== "none" && uidOf(listener.pid) === listener.uid) {
      try {
        process.kill(listener.pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
    await this.killAll({ uid, gid: uid });
    for (let attempt = 0; attempt < ADOPT_ATTEMPTS; attempt++) {
      const server = await tryHold(uid);
      if (server !== undefined) return server;
      await new Promise((resolve) => setTimeout(resolve, ADOPT_RETRY_MS));
    }
    this.#logger.warn({ uid }, "a session uid's hold is still held by a process that is no sandbox's: uid left alone");
    return undefined;
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
