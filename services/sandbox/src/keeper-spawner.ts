// Starts session keepers (session-keeper.ts) without forking the sandbox.
// Spawning a keeper from Node forks the whole sandbox process (its heap's page
// tables) and runs `mkfifo` synchronously in the main thread: about a quarter
// of the sandbox's CPU per job in the control-plane bench. Instead one small
// Perl process per sandbox (this spawner) keeps a few spare keepers forked
// ahead, and as many stdin FIFOs made. A session takes a spare: the sandbox
// renames a FIFO into the session's internal folder (a reused folder has its
// own still, session-directories.ts: none is taken), makes the output files,
// and sends the spare (through the spawner) the command, its folder, working
// directory and environment; the spare becomes that session's keeper, opens
// the folder's FIFO, and the spawner forks the next one. Its pid is known
// when the session starts, as a child's would be, so nothing waits for it.
//
// The spawner is the keepers' parent: it reaps them and reports each exit
// ("exit <pid> <code> <signal>") on its stdout. Keepers are session leaders of
// their own (setsid) and hold none of the spawner's pipes, so they outlive it
// and the sandbox as before; a spawner that ends (the sandbox closes its
// stdin, or died) lets its unused spares end. When it is gone while sessions
// still run, their ends are followed through the keepers' exit files, as for
// a session taken over after a restart. When no spare is ready (a burst of
// starts, the spawner restarting), the sandbox starts the keeper itself.
import { spawn, type ChildProcess } from "node:child_process";
import { lstatSync, mkdirSync, renameSync, rmSync } from "node:fs";
import path from "node:path";
import { createInterface } from "node:readline";
import type { Logger } from "@oz0/serving";
import {
  createKeeperOutputs,
  extraStdioCount,
  followKeeperExit,
  holdFields,
  keeperFiles,
  KEEP_SUB,
  KeptChild,
  perl,
  processStartTime,
  signalName,
  type SpareKeepers,
} from "./session-keeper.js";

/**
 * The spawner's loop. Requests on stdin: "<length>\n<pid>\0<FIFO taken or
 * empty>\0<dir>\0<orphan ms>\0<extra>\0<file to read or empty>\0<hold file or empty>\0<uid or empty>\0<cwd>\0<env count>\0<NAME=value>...\0<file>\0<arg>...";
 * reports on stdout: "spare <pid>" once a spare is ready, "fifo <name>" once a
 * FIFO is, "exit <pid> <code> <signal>" when a child (keeper or spare) ended.
 */
const SPAWNER = String.raw`${KEEP_SUB}
my ($spares_dir, $owner, $want) = @ARGV;
$| = 1;
$SIG{CHLD} = sub {};
$SIG{PIPE} = "IGNORE";
my (%spare, %fifo, $made, $failed_at);
sub add_fifo {
  my $name = "$$." . ++$made;
  POSIX::mkfifo("$spares_dir/$name", 0600) or do { print STDERR "cannot make the FIFO $spares_dir/$name: $!\n"; return 0 };
  $fifo{$name} = 1;
  print "fifo $name\n";
  1;
}
sub add_spare {
  pipe(my $r, my $w) or do { print STDERR "pipe failed: $!\n"; return 0 };
  my $pid = fork() // do { print STDERR "fork failed: $!\n"; close $r; close $w; return 0 };
  if ($pid == 0) {
    close $w; close $_ for values %spare;
    POSIX::setsid();
    open(STDIN, "<", "/dev/null"); open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null");
    $SIG{CHLD} = "DEFAULT";
    my $line = <$r>;
    # The spawner ended before this spare was used.
    POSIX::_exit(0) unless defined $line;
    my $len = $line + 0; my $msg = "";
    while (length($msg) < $len) { my $got = read($r, $msg, $len - length($msg), length($msg)); POSIX::_exit(0) unless $got }
    close $r;
    my ($dir, $orphan_ms, $extra, $read, $hold, $uid, $cwd, $envc, @rest) = split /\0/, $msg, -1;
    my %env = map { /\A([^=]*)=(.*)\z/s ? ($1, $2) : () } splice(@rest, 0, $envc);
    # The FIFO is in the session's folder by now (renamed there, or the reused folder's own).
    keep($dir, $owner, $orphan_ms, $extra, $read, $hold, $uid, $cwd, \%env, undef, @rest);
  }
  close $r;
  $spare{$pid} = $w;
  print "spare $pid\n";
  1;
}
sub assign {
  my ($pid, $taken, $rest) = split /\0/, $_[0], 3;
  delete $fifo{$taken} if $taken ne "";
  my $w = delete $spare{$pid} or return;
  print {$w} length($rest) . "\n" . $rest;
  close $w;
}
my $buf = "";
for (;;) {
  while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0) {
    my $status = $?;
    delete $spare{$pid};
    my ($code, $sig) = ($status & 127) ? ("", $status & 127) : ($status >> 8, "");
    print "exit $pid $code $sig\n";
  }
  # After a failure (said on stderr), the next try in a few seconds.
  if (!defined $failed_at || time() - $failed_at >= 5) {
    $failed_at = undef;
    for (my $n = keys %spare; $n < $want; $n++) { next if add_spare(); $failed_at = time(); last }
    for (my $n = keys %fifo; $n < $want && !defined $failed_at; $n++) { next if add_fifo(); $failed_at = time(); last }
  }
  my $rin = ""; vec($rin, 0, 1) = 1;
  next unless select(my $rout = $rin, undef, undef, 0.25) > 0;
  my $got = sysread(STDIN, $buf, 65536, length $buf);
  if (!defined $got) { next if $!{EINTR} || $!{EAGAIN}; last }
  last if $got == 0;
  while ($buf =~ /\A(\d+)\n/) {
    my $head = length($1) + 1; my $len = $1;
    last if length($buf) < $head + $len;
    assign(substr($buf, $head, $len));
    substr($buf, 0, $head + $len) = "";
  }
}
# The unused spares end at the end of their pipes, waited for, and the unused FIFOs go: nothing is left once this has ended.
close $_ for values %spare;
waitpid($_, 0) for keys %spare;
unlink "$spares_dir/$_" for keys %fifo;
POSIX::_exit(0);
`;

/** After the spawner ended on its own, how long before it is started again. */
const RESTART_MS = 1000;

export interface KeeperSpawnerOptions {
  /** A folder of its own on the sandbox root's filesystem (its FIFOs are renamed from there into sessions' folders); emptied at start. */
  dir: string;
  /** Spare keepers kept ready. */
  spares: number;
  logger: Logger;
}

export class KeeperSpawner implements SpareKeepers {
  readonly #options: KeeperSpawnerOptions;
  #process: ChildProcess | undefined;
  /** Ready spares' pids, oldest first. */
  #ready: number[] = [];
  /** Ready FIFOs, oldest first. */
  #fifos: string[] = [];
  /** Keepers started from spares whose end the spawner has not reported yet. */
  readonly #kept = new Map<number, { child: KeptChild; dir: string; startTime: string | undefined }>();
  #closed = false;
  #restart: NodeJS.Timeout | undefined;

  constructor(options: KeeperSpawnerOptions) {
    this.#options = options;
    this.#start();
  }

  #start(): void {
    const { dir, spares, logger } = this.#options;
    // What a previous run's spawner left; one still ending meanwhile (its sandbox was killed) may keep a spare's FIFO a
    // moment longer, which names its own pid and so never collides with this one's.
    try {
      rmSync(dir, { recursive: true, force: true, maxRetries: 2 });
    } catch {
      // Left as it is: the FIFOs made below have names of their own.
    }
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
    } catch (error) {
      logger.warn(
        { err: error, dir },
        "cannot prepare the keeper spawner's folder; the sandbox starts every keeper itself",
      );
      return;
    }
    const child = spawn(perl(), ["-e", SPAWNER, dir, String(process.pid), String(spares)], {
      cwd: "/",
      env: {},
      stdio: ["pipe", "pipe", "pipe"],
    });
    this.#process = child;
    // Never what keeps the sandbox running: when it exits, the spawner reads the end of its stdin and ends too.
    child.unref();
    for (const stream of [child.stdin, child.stdout, child.stderr])
      (stream as unknown as { unref?: () => void }).unref?.();
    // Writes to a spawner that just died fail: its exit is handled below.
    child.stdin.on("error", () => {});
    createInterface({ input: child.stdout }).on("line", (line) => this.#report(line));
    createInterface({ input: child.stderr }).on("line", (line) =>
      logger.warn({ spawner: line }, "the keeper spawner could not make a spare keeper"),
    );
    child.on("error", (error) => logger.warn({ err: error }, "the keeper spawner could not start"));
    child.on("exit", (code, signal) => this.#ended(child, code, signal));
  }

  #report(line: string): void {
    const [kind, pidText = "", a = "", b = ""] = line.split(" ");
    const pid = Number(pidText);
    if (kind === "spare") {
      this.#ready.push(pid);
      return;
    }
    if (kind === "fifo") {
      this.#fifos.push(path.join(this.#options.dir, pidText));
      return;
    }
    if (kind !== "exit") return;
    this.#ready = this.#ready.filter((spare) => spare !== pid);
    const kept = this.#kept.get(pid);
    if (kept === undefined) return;
    this.#kept.delete(pid);
    kept.child.exited(a === "" ? null : Number(a), b === "" ? null : (signalName(Number(b)) ?? "SIGKILL"));
  }

  #ended(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#process !== child) return;
    this.#process = undefined;
    this.#ready = [];
    this.#fifos = [];
    // Their keepers run on, no longer this process's grandchildren to hear of: their exit files tell.
    for (const [pid, kept] of this.#kept)
      followKeeperExit(kept.child, { dir: kept.dir, pid, startTime: kept.startTime });
    this.#kept.clear();
    if (this.#closed) return;
    this.#options.logger.warn(
      { code, signal, restartInMs: RESTART_MS },
      "the keeper spawner ended; the sandbox starts keepers itself until it is back",
    );
    this.#restart = setTimeout(() => {
      this.#restart = undefined;
      if (!this.#closed) this.#start();
    }, RESTART_MS);
    this.#restart.unref();
  }

  take(options: Parameters<SpareKeepers["take"]>[0]): KeptChild | undefined {
    const child = this.#process;
    const spare = this.#ready.shift();
    if (child === undefined || spare === undefined) return undefined;
    const { dir, orphanMs, hold, file, args, spawn: spawnOptions, readFile } = options;
    const env = Object.entries(spawnOptions.env ?? {}).flatMap(([name, value]) =>
      value === undefined ? [] : [`${name}=${value}`],
    );
    const cwd = typeof spawnOptions.cwd === "string" ? spawnOptions.cwd : (spawnOptions.cwd?.pathname ?? "");
    const extra = extraStdioCount(spawnOptions);
    const fields = [
      dir,
      String(orphanMs),
      String(extra),
      readFile ?? "",
      ...holdFields(hold),
      cwd,
      String(env.length),
      ...env,
      file,
      ...args,
    ];
    // As child_process.spawn refuses them: a NUL would shift every later field.
    if (fields.some((field) => field.includes("\0")))
      throw new Error("a command, argument or environment entry contains a NUL byte");
    // A reused folder has its FIFO still (sealed from the harness, and no longer open anywhere); another takes one made ahead.
    const stdin = keeperFiles(dir).stdin;
    let taken = "";
    if (lstatSync(stdin, { throwIfNoEntry: false })?.isFIFO() !== true) {
      const fifo = this.#fifos.shift();
      try {
        if (fifo === undefined) throw new Error("no FIFO ready");
        renameSync(fifo, stdin);
      } catch {
        // None ready, another filesystem, or the folder is gone: the spare (and the FIFO) stay for the next session.
        if (fifo !== undefined) this.#fifos.unshift(fifo);
        this.#ready.unshift(spare);
        return undefined;
      }
      taken = path.basename(fifo);
    }
    createKeeperOutputs(dir, extra);
    const payload = [String(spare), taken, ...fields].join("\0");
    child.stdin!.write(`${Buffer.byteLength(payload)}\n${payload}`);
    const kept = new KeptChild({ dir, pid: spare, from: { stdout: 0, stderr: 0 }, extra });
    this.#kept.set(spare, { child: kept, dir, startTime: processStartTime(spare) });
    return kept;
  }

  /** No more spares: the spawner ends once it read this (its unused spares with it); keepers run on. Resolves once it has ended. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#restart);
    const child = this.#process;
    if (child === undefined) return;
    const ended = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    // Held until it has ended, so a caller awaiting this is not left by an event loop with nothing else to do.
    child.ref();
    child.stdin?.end();
    await ended;
  }
}
