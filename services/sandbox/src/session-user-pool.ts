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
import { spawn } from "node:child_process";
import { randomInt } from "node:crypto";
import net from "node:net";
import type { Logger } from "@oz0/serving";
import type { SessionUidRange } from "./sandbox-config.js";
import { SandboxError } from "./sandbox-errors.js";
import { removeUidLeftovers, uidsWithSystemVObjects } from "./session-user-files.js";
import { killAllProcessesOf, uidsWithProcesses, type SessionUser } from "./session-user-processes.js";
import { systemCommand } from "./system-command.js";

/** The holds' abstract name, before the uid. */
const HOLD_PREFIX = "oz0-sandbox-session-uid-";

function holdName(uid: number): string {
  return `\0${HOLD_PREFIX}${uid}`;
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
 * Who has the hold of each uid read from stdin (one a line). Perl prints "<uid> sandbox" when a listener outside the
 * range answers on it (SO_PEERCRED: every sandbox's hold listens, and sandboxes run outside the range); else
 * "<uid> <pid> <holder's uid>" for each process with its socket open, the socket's inode read from /proc/net/unix
 * and found among the descriptors in /proc/<pid>/fd. Nothing for a uid: no process has it (a descriptor in flight in
 * a Unix socket's queue), or it was let go meanwhile. Connects are non-blocking: a listener whose backlog is full
 * (never accepting) is looked for among the descriptors like one that does not listen. Node can read neither
 * another socket's peer credentials nor which process has a socket; one perl run answers for every uid asked.
 * SOL_SOCKET 1, SO_PEERCRED 17, F_SETFL 4 and O_NONBLOCK 04000 are x86-64's and arm64's; struct ucred is { pid_t,
 * uid_t, gid_t }. Arguments: the holds' name before the uid, then the range's base and count.
 */
const HOLD_HOLDERS = String.raw`
my ($prefix, $base, $count) = @ARGV;
my %looked_for;
while (my $line = <STDIN>) {
  my ($uid) = $line =~ /^(\d+)$/ or next;
  socket(my $s, 1, 1, 0) or die "socket: $!";
  fcntl($s, 4, 04000) or die "fcntl: $!";
  my $listener;
  (undef, $listener) = unpack("lL", getsockopt($s, 1, 17) // "") if connect($s, pack("S a*", 1, "\0$prefix$uid"));
  close $s;
  if (defined $listener && ($listener < $base || $listener >= $base + $count)) { print "$uid sandbox\n" }
  else { $looked_for{$uid} = 1 }
}
exit 0 unless %looked_for;
my %hold_of;
open(my $net, "<", "/proc/net/unix") or die "/proc/net/unix: $!";
while (<$net>) {
  my @field = split;
  $hold_of{$field[6]} = $1 if @field == 8 && $field[7] =~ /^\@\Q$prefix\E(\d+)$/ && $looked_for{$1};
}
close $net;
exit 0 unless %hold_of;
opendir(my $proc, "/proc") or die "/proc: $!";
for my $pid (grep { /^\d+$/ } readdir $proc) {
  opendir(my $fds, "/proc/$pid/fd") or next;
  my %holds;
  for my $fd (readdir $fds) {
    my ($inode) = (readlink("/proc/$pid/fd/$fd") // "") =~ /^socket:\[(\d+)\]$/ or next;
    $holds{$hold_of{$inode}} = 1 if exists $hold_of{$inode};
  }
  closedir $fds;
  next unless %holds;
  open(my $status, "<", "/proc/$pid/status") or next;
  my ($holder) = map { /^Uid:\s+(\d+)/ ? $1 : () } <$status>;
  close $status;
  print "$_ $pid $holder\n" for defined $holder ? keys %holds : ();
}
`;

/** A uid's hold as another has it: a sandbox's, or the processes that have its socket open (none: in flight, or let go). */
type HoldHolders = "sandbox" | { pid: number; uid: number }[];

/**
 * HOLD_HOLDERS's answer for `uids`, each with its holders ([] when nothing was found); undefined where it cannot be
 * told (no perl, another architecture, the run failed). Run in a child, not the event loop: it reads every
 * process's descriptors.
 */
async function holdHolders(
  uids: readonly number[],
  range: SessionUidRange,
): Promise<Map<number, HoldHolders> | undefined> {
  const perl = systemCommand("perl");
  if (perl === undefined || (process.arch !== "x64" && process.arch !== "arm64")) return undefined;
  const run = await new Promise<{ code: number | null; stdout: string }>((resolve) => {
    const child = spawn(perl, ["-e", HOLD_HOLDERS, HOLD_PREFIX, String(range.base), String(range.count)], {
      stdio: ["pipe", "pipe", "ignore"],
      timeout: 10_000,
    });
    let stdout = "";
    child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.once("error", () => resolve({ code: null, stdout }));
    child.once("close", (code) => resolve({ code, stdout }));
    child.stdin.on("error", () => undefined);
    child.stdin.end(uids.map((uid) => `${uid}\n`).join(""));
  });
  if (run.code !== 0) return undefined;
  const found = new Map<number, HoldHolders>(uids.map((uid) => [uid, []]));
  for (const line of run.stdout.split("\n")) {
    const [uid, pid, holder] = line.split(" ").map(Number);
    const holders = found.get(uid!);
    if (holders === undefined || holders === "sandbox") continue;
    if (pid === undefined || Number.isNaN(pid)) found.set(uid!, "sandbox");
    else holders.push({ pid, uid: holder! });
  }
  return found;
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

export class SessionUserPool {
  /** The kills under way, by uid. */
  readonly #killing = new Map<number, Promise<void>>();
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
  }) {
    this.range = options.range;
    this.#logger = options.logger;
    this.#contained = options.contained === true;
    // Sandboxes starting together begin their searches apart.
    this.#cursor = randomInt(0, options.range.count);
  }

  /** A uid no other session on this host holds, its leftover processes killed. */
  async acquire(): Promise<SessionUserLease> {
    const { base, count } = this.range;
    const heldElsewhere: number[] = [];
    for (let tried = 0; tried < count; tried++) {
      const uid = base + ((this.#cursor + tried) % count);
      if (this.#held.has(uid)) continue;
      const server = await tryHold(uid);
      if (server === undefined) {
        heldElsewhere.push(uid);
        continue;
      }
      const lease = await this.#leaseOf(uid, server);
      if (lease === undefined) continue;
      this.#cursor = (this.#cursor + tried + 1) % count;
      return lease;
    }
    // Every uid held: by other sandboxes' sessions, or by sessions' processes that bound their holds (see below).
    let lease: SessionUserLease | undefined;
    for (const [uid, server] of await this.#takeBackFromSessions(heldElsewhere)) {
      // One leased; the others let go, free for any sandbox again.
      if (lease === undefined) lease = await this.#leaseOf(uid, server);
      else await closeHold(server);
    }
    if (lease !== undefined) return lease;
    throw new SandboxError(
      "resource_exhausted",
      `every session uid from ${base} to ${base + count - 1} is in use on this host (OZ0_SANDBOX_UID_BASE, OZ0_SANDBOX_UID_COUNT); retry after a session ends, or widen the range`,
    );
  }

  /** `uid`, its hold just taken, leased; undefined (the hold let go) when a kept session's keeper holds it. */
  async #leaseOf(uid: number, server: net.Server): Promise<SessionUserLease | undefined> {
    if (await keptByKeeper(uid)) {
      await closeHold(server);
      return undefined;
    }
    this.#held.add(uid);
    const user = { uid, gid: uid };
    // What a killed sandbox's session of the uid left runs no more, nor lies where the next session would find it.
    if (!this.#contained) await this.#clean(user);
    return new SessionUserLease(new Holding(user, server, this));
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
    const left = [...new Set([...withProcesses.keys(), ...withObjects])].filter((uid) => !this.#held.has(uid));
    const holds = new Map<number, net.Server>();
    for (const uid of left) {
      const server = await tryHold(uid);
      if (server !== undefined) holds.set(uid, server);
    }
    for (const [uid, server] of await this.#takeBackFromSessions(left.filter((uid) => !holds.has(uid))))
      holds.set(uid, server);
    for (const uid of left) {
      const server = holds.get(uid);
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
          const error = await killAllProcessesOf(user);
          if (error !== undefined)
            this.#logger.error({ err: error, uid: user.uid }, "could not kill the processes of a session uid");
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
  async #clean(user: SessionUser): Promise<void> {
    await this.killAll(user);
    const left = await removeUidLeftovers(user);
    if (left !== undefined)
      this.#logger.warn({ uid: user.uid, left }, "could not remove all a session uid left in the node's shared places");
  }

  /**
   * The holds of `uids` that sessions' processes took rather than sandboxes, taken back. Any process may bind an
   * abstract name: a process that outlived its killed sandbox can bind its own uid's, to be passed over as another
   * sandbox's running session by every start after, alive for good; a running user-mode session can bind free uids'
   * (as many as its open files limit, the whole range by default), and no session could start on the host while it
   * runs. A hold that processes of the range have open, and nothing outside it, is a session's: every process of the
   * holders' uids is killed (binding another uid's hold is nothing a harness does), and the hold taken. One that no
   * process has open and that still cannot be taken is bound by a descriptor in flight, likely to one of the uid's
   * own processes: they are killed, and it is tried again. Uids sandboxes hold are left alone, and so is one that
   * could not be taken back (logged).
   */
  async #takeBackFromSessions(uids: readonly number[]): Promise<Map<number, net.Server>> {
    const taken = new Map<number, net.Server>();
    const holders = uids.length > 0 ? await holdHolders(uids, this.range) : undefined;
    if (holders === undefined) return taken;
    const { base, count } = this.range;
    const inRange = (id: number): boolean => id >= base && id < base + count;
    const squatted = new Map<number, number[]>();
    for (const [uid, found] of holders) {
      if (found === "sandbox" || !found.every((holder) => inRange(holder.uid))) continue;
      if (found.length > 0) squatted.set(uid, [...new Set(found.map((holder) => holder.uid))]);
      else {
        // Let go since it was tried (no sandbox holds it: every sandbox has its hold open), or in flight.
        const server = await tryHold(uid);
        if (server !== undefined) taken.set(uid, server);
        else squatted.set(uid, [uid]);
      }
    }
    if (squatted.size === 0) return taken;
    const killed = new Set([...squatted.values()].flat());
    this.#logger.warn(
      {
        uids: [...squatted.keys()].slice(0, 20),
        of: squatted.size,
        killed: [...killed],
        holders: [...squatted].slice(0, 20).map(([uid]) => ({ uid, heldBy: holders.get(uid) })),
      },
      "sessions' processes held uids' holds, which only sandboxes take: killing every process of their uids",
    );
    await Promise.all([...killed].map((uid) => this.killAll({ uid, gid: uid })));
    for (const uid of squatted.keys()) {
      for (let attempt = 0; attempt < ADOPT_ATTEMPTS && !taken.has(uid); attempt++) {
        const server = await tryHold(uid);
        if (server !== undefined) taken.set(uid, server);
        else await new Promise((resolve) => setTimeout(resolve, ADOPT_RETRY_MS));
      }
      if (!taken.has(uid))
        this.#logger.warn(
          { uid },
          "a session uid's hold is still held by a process that is no sandbox's: uid left alone",
        );
    }
    return taken;
  }

  /** @internal Called by the last lease of a holding. */
  async free(holding: Holding): Promise<void> {
    if (!this.#contained) await this.#clean(holding.user);
    await closeHold(holding.server);
    this.#held.delete(holding.user.uid);
    if (this.#adopted.get(holding.user.uid) === holding) this.#adopted.delete(holding.user.uid);
  }
}
