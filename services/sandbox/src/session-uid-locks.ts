// What holds a session uid host-wide: an exclusive flock(2) on a file named for
// the uid in a folder only the sandbox's own uid (root) can enter. No session
// can open the file, so none can take or keep a uid from the pools; the
// kernel drops a lock when its last descriptor closes, so a sandbox killed
// with SIGKILL leaves none behind. (The holds were abstract Unix socket names
// before: any process in the network namespace could bind them, a session too,
// and keep every free uid from every pool for its life.)
//
// Node cannot flock, so the locks are held by a small Perl helper the pool
// talks to over its stdin and stdout, one line each way a request. It ends at
// the end of its stdin: with the sandbox, however that ends. Should it die
// while the sandbox runs, its locks die with it; the next helper takes the
// held ones again at once, and logs any that another sandbox took meanwhile,
// whose processes the pool then leaves alone (UidLocks.holds).
//
// A session's keeper (session-keeper.ts) locks the uid's `-kept` file itself
// while a session that may outlive the sandbox runs.
import { spawn, type ChildProcess } from "node:child_process";
import { lstatSync, mkdirSync } from "node:fs";
import type { Socket } from "node:net";
import path from "node:path";
import type { Logger } from "@oz0/serving";
import { SandboxError } from "./sandbox-errors.js";
import { perl } from "./session-keeper.js";

/**
 * Where the locks live unless a pool is told otherwise: host-wide (every sandbox of the host's mount namespace),
 * and on a tmpfs, gone at the next boot with every process that held one.
 */
export const DEFAULT_UID_LOCK_DIR = "/run/oz0-sandbox/session-uids";

/**
 * The helper. Requests, one a line: "L <name>" locks the file <name> and answers 1, or 0 when another holds it;
 * "L <name> <other>" does so only while nobody holds <other> (a uid whose keeper holds its `-kept` lock is not
 * free), answering 0 otherwise; "U <name>" lets <name> go (1). "E <why>" answers a request that failed.
 * A name this helper holds already is another's to a new lock too: flock belongs to the open file, not the process.
 * One round trip a uid taken, and one given back (so that a uid given back is free to every other sandbox at once).
 *
 * A file is removed by whoever lets it go, while still locking it (a range of 65,536 uids would otherwise leave
 * twice as many files on /run's tmpfs); so a lock counts only once the name is still the file locked, and a probe of
 * <other> creates nothing. The helper lives in the folder (no path is looked up twice), in a process group of its own,
 * and ignores the signals that stop the sandbox's group (Ctrl-C, systemd's SIGTERM to the unit): it must hold the uids
 * until the sandbox has ended their sessions, and ends at the end of its stdin.
 */
const LOCK_HELPER = String.raw`
# oz0 session uid locks
use strict; use Fcntl qw(O_RDWR O_CREAT O_NOFOLLOW LOCK_EX LOCK_NB);
$SIG{$_} = "IGNORE" for qw(TERM INT HUP PIPE);
$| = 1;
chdir $ARGV[0] or die "cannot enter $ARGV[0]: $!\n";
my %held;
# An exclusive lock on the file <name>, as an open handle (closing it lets go); undef when another holds it, or, unless
# $create, when there is no such file.
sub take {
  my ($name, $create) = @_;
  for (1 .. 3) {
    if (!sysopen(my $fh, $name, O_RDWR | ($create ? O_CREAT : 0) | O_NOFOLLOW, 0600)) {
      return undef if !$create && $!{ENOENT};
      die "cannot open $name: $!\n";
    } elsif (!flock($fh, LOCK_EX | LOCK_NB)) {
      $!{EWOULDBLOCK} or die "cannot lock $name: $!\n";
      return undef;
    } else {
      # Its holder removed the file as it let go: the name is another file's now, or none's.
      my @locked = stat($fh); my @named = lstat($name);
      return $fh if @named && $locked[0] == $named[0] && $locked[1] == $named[1];
    }
  }
  # Taken and let go three times running meanwhile: busy, as held.
  return undef;
}
while (my $line = <STDIN>) {
  chomp $line;
  my ($op, $name, $unless) = $line =~ /^([LU]) (\d+(?:-kept)?)(?: (\d+-kept))?$/ or do { print "E bad request\n"; next };
  if ($op eq "U") { if (my $fh = delete $held{$name}) { unlink $name; close $fh } print "1\n"; next }
  my $fh = eval {
    my $fh = take($name, 1);
    if ($fh && defined $unless) {
      # Free when nobody holds it: removed (a keeper that was killed left it), and let go.
      my $other = take($unless, 0);
      if ($other) { unlink $unless; close $other } elsif (-e $unless) { unlink $name; close $fh; $fh = undef }
    }
    $fh;
  };
  if ($@) { print "E $@"; next }
  $held{$name} = $fh if $fh;
  print $fh ? "1\n" : "0\n";
}
`;

/**
 * Makes the lock folder (and its parent) when missing, and refuses one that anybody but this process's uid could
 * enter or replace: whoever could open a lock file could keep its uid from every pool.
 */
export function prepareUidLockDir(dir: string): void {
  const own = process.geteuid?.();
  try {
    mkdirSync(path.dirname(dir), { recursive: true, mode: 0o755 });
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new SandboxError(
      "failed_precondition",
      `cannot make the session uid lock folder ${dir} (${(error as Error).message}): point OZ0_SANDBOX_UID_LOCK_DIR at a writable folder every sandbox of the host shares (a tmpfs), or run sessions without uids of their own`,
      { cause: error },
    );
  }
  for (const [folder, closed] of [
    [path.dirname(dir), 0o022],
    [dir, 0o077],
  ] as const) {
    const stat = lstatSync(folder);
    if (!stat.isDirectory() || stat.uid !== own || (stat.mode & closed) !== 0)
      throw new SandboxError(
        "failed_precondition",
        `the session uid lock folder ${dir} is unsafe: ${folder} must be a directory owned by uid ${own ?? "unknown"} that ` +
          `${closed === 0o077 ? "nobody else can enter" : "nobody else can write"} (it is ${stat.isDirectory() ? "a directory" : "not a directory"} ` +
          `of uid ${stat.uid}, mode ${(stat.mode & 0o7777).toString(8).padStart(4, "0")}); remove it and restart the sandbox, which makes it anew`,
      );
  }
}

interface Waiter {
  resolve(answer: string): void;
  reject(error: Error): void;
}

/** How long a caller waits for a lock a dead helper held to be taken again before it counts as not this pool's. */
const RETAKE_WAIT_MS = 10_000;

/** The uid locks of one pool, through its helper (started at the first request). */
export class UidLocks {
  readonly dir: string;
  readonly #logger: Logger;
  #helper: ChildProcess | undefined;
  #helperStarted = 0;
  #closed = false;
  /** Answers not yet read, in the order the requests went out. */
  #waiting: Waiter[] = [];
  #pending = "";
  /** The names this pool holds, or held when a helper died and has not been told otherwise since. */
  readonly #held = new Set<string>();
  /** Held names a helper died with, each resolved true once a new helper took it again, false once that failed. */
  readonly #retaking = new Map<string, PromiseWithResolvers<boolean>>();
  /** Of those, the ones no new helper was asked for yet. */
  #toRetake = new Set<string>();
  /** Held names another sandbox took while no helper held them: their uids are not this pool's alone any more. */
  readonly #lost = new Set<string>();

  constructor(options: { dir: string; logger: Logger }) {
    this.dir = path.resolve(options.dir);
    this.#logger = options.logger;
    prepareUidLockDir(this.dir);
  }

  /** The file behind `name`, for a keeper that locks it itself. */
  file(name: string): string {
    return path.join(this.dir, name);
  }

  /**
   * Locks `name`: false when another (this pool included) holds it, or holds `unlessHeld` when given, or when the
   * file could not be locked at all (logged: one bad file passes one uid over, not the pool).
   */
  async lock(name: string, unlessHeld?: string): Promise<boolean> {
    const request = unlessHeld === undefined ? `L ${name}` : `L ${name} ${unlessHeld}`;
    const answer = await this.#ask(request);
    if (answer.startsWith("E ")) {
      this.#logger.warn({ lock: name, why: answer.slice(2) }, "could not lock a session uid's file: uid passed over");
      return false;
    }
    if (answer !== "1") return false;
    this.#held.add(name);
    this.#lost.delete(name);
    return true;
  }

  /**
   * Whether this pool holds `name` for certain: not when another sandbox took it while no helper held it, nor, once
   * a helper died with it, until a new one took it again (waited for, RETAKE_WAIT_MS at most). Whatever acts on a
   * uid's processes asks first: they may be another sandbox's session's.
   */
  async holds(name: string): Promise<boolean> {
    if (!this.#held.has(name) || this.#lost.has(name)) return false;
    const pending = this.#retaking.get(name);
    if (pending === undefined) return true;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), RETAKE_WAIT_MS);
    });
    try {
      return await Promise.race([pending.promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Lets go of `name`, resolving once another sandbox can take it. Never rejects: a helper that died let go of it
   * already, and one that was never told of it (a retake not yet asked) is not told now. Nothing to do once closed.
   */
  async unlock(name: string): Promise<void> {
    this.#held.delete(name);
    this.#toRetake.delete(name);
    this.#lost.delete(name);
    this.#settleRetake(name, false);
    if (this.#closed || this.#helper === undefined) return;
    await this.#ask(`U ${name}`).catch(() => {});
  }

  /** Ends the helper, which lets go of every lock this pool still holds (as the sandbox's exit would). */
  close(): void {
    this.#closed = true;
    this.#helper?.stdin?.end();
    for (const name of [...this.#retaking.keys()]) this.#settleRetake(name, false);
  }

  /** @internal The helper's pid, for the test that kills it. */
  get helperPid(): number | undefined {
    return this.#helper?.pid;
  }

  #ask(request: string): Promise<string> {
    if (this.#closed) return Promise.reject(new SandboxError("unavailable", "the sandbox is shutting down"));
    let helper: ChildProcess;
    try {
      helper = this.#helper ?? this.#start();
    } catch (error) {
      return Promise.reject(
        new SandboxError("unavailable", `cannot start the session uid lock helper: ${(error as Error).message}`),
      );
    }
    return new Promise<string>((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
      // Kept alive while an answer is due, through the helper's death too; an idle helper never holds the sandbox up.
      helper.ref();
      // A spawn that failed (out of descriptors) has no pipes: its "error", next, fails what waits.
      if (!helper.stdin || !helper.stdout) return;
      (helper.stdout as Socket).ref();
      helper.stdin.write(`${request}\n`);
    });
  }

  #start(): ChildProcess {
    const helper = spawn(perl(), ["-e", LOCK_HELPER, this.dir], {
      stdio: ["pipe", "pipe", "ignore"],
      detached: true,
    });
    this.#helper = helper;
    this.#helperStarted = Date.now();
    this.#pending = "";
    helper.on("error", (error) => this.#helperLost(helper, error.message));
    helper.on("exit", (code, signal) => this.#helperLost(helper, `exited (${signal ?? code})`));
    this.#idle(helper);
    if (helper.stdin && helper.stdout) {
      helper.stdin.on("error", () => {}); // its end is reported by "exit"
      helper.stdout.setEncoding("utf8");
      helper.stdout.on("data", (chunk: string) => {
        if (this.#helper !== helper) return; // a helper given up on: what it says answers nothing
        this.#pending += chunk;
        for (let end = this.#pending.indexOf("\n"); end >= 0; end = this.#pending.indexOf("\n")) {
          const answer = this.#pending.slice(0, end);
          this.#pending = this.#pending.slice(end + 1);
          this.#waiting.shift()?.resolve(answer);
        }
        if (this.#waiting.length === 0) this.#idle(helper);
      });
      helper.stdout.on("close", () => this.#helperLost(helper, "closed its output"));
    }
    // What a helper that died held is taken again first, before what the new one was started for.
    const names = [...this.#toRetake];
    this.#toRetake = new Set();
    for (const name of names) this.#retake(name);
    return helper;
  }

  #idle(helper: ChildProcess): void {
    helper.unref();
    (helper.stdout as Socket | null | undefined)?.unref();
    (helper.stdin as unknown as Socket | null | undefined)?.unref();
  }

  /** The helper died, and its locks with it: what waited fails, and a new helper takes the held names again. */
  #helperLost(helper: ChildProcess, why: string): void {
    if (this.#helper !== helper) return;
    this.#helper = undefined;
    this.#idle(helper);
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const waiter of waiting)
      waiter.reject(new SandboxError("unavailable", `the session uid lock helper ${why}; try again`));
    if (this.#held.size === 0 || this.#closed) return;
    for (const name of this.#held) {
      if (this.#lost.has(name)) continue;
      if (!this.#retaking.has(name)) this.#retaking.set(name, Promise.withResolvers<boolean>());
      this.#toRetake.add(name);
    }
    // At once, unless it died young: one that cannot start at all (perl gone) is not started again in a tight loop.
    const delayMs = Date.now() - this.#helperStarted < 1_000 ? 1_000 : 0;
    this.#logger.error(
      { why, held: this.#toRetake.size, delayMs },
      "the session uid lock helper died: taking its locks again",
    );
    setTimeout(() => {
      if (this.#helper !== undefined || this.#toRetake.size === 0 || this.#closed) return;
      try {
        this.#start();
      } catch (error) {
        this.#logger.error({ err: error }, "cannot start the session uid lock helper: retried at the next request");
      }
    }, delayMs).unref();
  }

  #retake(name: string): void {
    this.#ask(`L ${name}`).then(
      (answer) => {
        if (!this.#held.has(name)) return;
        if (answer === "1") return this.#settleRetake(name, true);
        this.#lost.add(name);
        this.#settleRetake(name, false);
        this.#logger.error(
          { lock: name, why: answer.startsWith("E ") ? answer.slice(2) : "held by another" },
          "a session uid's lock could not be taken again after its helper died: another sandbox may run a session under the uid, which this one no longer acts on",
        );
      },
      // This helper died too: its end has the next one take the name again.
      (error: unknown) => this.#logger.error({ err: error, lock: name }, "could not take a session uid's lock again"),
    );
  }

  #settleRetake(name: string, taken: boolean): void {
    this.#retaking.get(name)?.resolve(taken);
    this.#retaking.delete(name);
  }
}
