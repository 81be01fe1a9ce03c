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
// held ones again at once, and logs any that another sandbox took meanwhile.
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
 * The helper. Requests, one a line: "L <name>" locks the file <name> (and answers 1) unless another holds it (0);
 * "U <name>" lets it go (1); "F <name>" answers 1 when nobody holds it (locking and letting go at once), 0 when
 * someone does. "E <why>" answers a request that failed. A name this helper holds already is another's to a new
 * lock too: flock belongs to the open file, not the process.
 */
const LOCK_HELPER = String.raw`
use strict; use Fcntl qw(O_RDWR O_CREAT O_NOFOLLOW LOCK_EX LOCK_NB);
$| = 1;
my ($dir) = @ARGV;
my %held;
while (my $line = <STDIN>) {
  chomp $line;
  my ($op, $name) = $line =~ /^([LUF]) (\d+(?:-kept)?)$/ or do { print "E bad request\n"; next };
  if ($op eq "U") { close(delete $held{$name}) if $held{$name}; print "1\n"; next }
  sysopen(my $fh, "$dir/$name", O_RDWR | O_CREAT | O_NOFOLLOW, 0600) or do { print "E cannot open $dir/$name: $!\n"; next };
  if (!flock($fh, LOCK_EX | LOCK_NB)) { print $!{EWOULDBLOCK} ? "0\n" : "E cannot lock $dir/$name: $!\n"; next }
  $held{$name} = $fh if $op eq "L";
  print "1\n";
}
`;

/**
 * Makes the lock folder (and its parent) when missing, and refuses one that anybody but this process's uid could
 * enter or replace: whoever could open a lock file could keep its uid from every pool.
 */
export function prepareUidLockDir(dir: string): void {
  const own = process.geteuid?.();
  mkdirSync(path.dirname(dir), { recursive: true, mode: 0o755 });
  mkdirSync(dir, { recursive: true, mode: 0o700 });
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
  /** The names this pool holds, taken again by a helper started after one died. */
  readonly #held = new Set<string>();

  constructor(options: { dir: string; logger: Logger }) {
    this.dir = options.dir;
    this.#logger = options.logger;
    prepareUidLockDir(this.dir);
  }

  /** The file behind `name`, for a keeper that locks it itself. */
  file(name: string): string {
    return path.join(this.dir, name);
  }

  /** Locks `name`: false when another (this pool included) holds it. */
  async lock(name: string): Promise<boolean> {
    const locked = (await this.#ask(`L ${name}`)) === "1";
    if (locked) this.#held.add(name);
    return locked;
  }

  /** Lets go of `name`; nothing to do once closed (the helper let go of everything). */
  async unlock(name: string): Promise<void> {
    this.#held.delete(name);
    if (!this.#closed) await this.#ask(`U ${name}`);
  }

  /** Whether nobody holds `name` now. */
  async isFree(name: string): Promise<boolean> {
    return (await this.#ask(`F ${name}`)) === "1";
  }

  /** Ends the helper, which lets go of every lock this pool still holds (as the sandbox's exit would). */
  close(): void {
    this.#closed = true;
    this.#helper?.stdin!.end();
  }

  /** @internal The helper's pid, for the test that kills it. */
  get helperPid(): number | undefined {
    return this.#helper?.pid;
  }

  #ask(request: string): Promise<string> {
    if (this.#closed) return Promise.reject(new SandboxError("unavailable", "the sandbox is shutting down"));
    const helper = this.#helper ?? this.#start();
    return new Promise<string>((resolve, reject) => {
      this.#waiting.push({ resolve, reject });
      // Kept alive while an answer is due; an idle helper never holds the sandbox up.
      (helper.stdout as Socket).ref();
      helper.stdin!.write(`${request}\n`);
    }).then((answer) => {
      if (answer.startsWith("E "))
        throw new SandboxError("unavailable", `the session uid lock helper: ${answer.slice(2)} (${request})`);
      return answer;
    });
  }

  #start(): ChildProcess {
    const helper = spawn(perl(), ["-e", LOCK_HELPER, this.dir], { stdio: ["pipe", "pipe", "ignore"] });
    this.#helper = helper;
    this.#helperStarted = Date.now();
    this.#pending = "";
    helper.unref();
    (helper.stdout as Socket).unref();
    (helper.stdin as unknown as Socket).unref();
    helper.stdin!.on("error", () => {}); // its end is reported by "exit"
    helper.stdout!.setEncoding("utf8");
    helper.stdout!.on("data", (chunk: string) => {
      this.#pending += chunk;
      for (let end = this.#pending.indexOf("\n"); end >= 0; end = this.#pending.indexOf("\n")) {
        const answer = this.#pending.slice(0, end);
        this.#pending = this.#pending.slice(end + 1);
        this.#waiting.shift()?.resolve(answer);
      }
      if (this.#waiting.length === 0) (helper.stdout as Socket).unref();
    });
    helper.on("error", (error) => this.#lost(helper, error.message));
    helper.on("exit", (code, signal) => this.#lost(helper, `exited (${signal ?? code})`));
    return helper;
  }

  /** The helper died, and its locks with it: what waited fails, and a new helper takes the held names again. */
  #lost(helper: ChildProcess, why: string): void {
    if (this.#helper !== helper) return;
    this.#helper = undefined;
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const waiter of waiting)
      waiter.reject(new SandboxError("unavailable", `the session uid lock helper ${why}; try again`));
    const held = [...this.#held];
    if (held.length === 0 || this.#closed) return;
    // One that could not even start (perl gone) is not started again in a tight loop.
    const delayMs = Date.now() - this.#helperStarted < 1_000 ? 1_000 : 0;
    this.#logger.error({ why, held: held.length, delayMs }, "the session uid lock helper died: taking its locks again");
    setTimeout(() => this.#retake(held), delayMs).unref();
  }

  #retake(names: readonly string[]): void {
    for (const name of names)
      if (this.#held.has(name))
        void this.#ask(`L ${name}`).then(
          (answer) => {
            if (answer !== "1" && this.#held.has(name))
              this.#logger.error(
                { lock: name },
                "another sandbox took a session uid while its lock helper was down: two sessions may share the uid",
              );
          },
          (error: unknown) => this.#logger.error({ err: error, lock: name }, "could not take a session uid lock again"),
        );
  }
}
