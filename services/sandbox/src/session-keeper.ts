// What lets a session outlive a crash of the sandbox (conmon and
// containerd-shim do the same for containers): the harness's launcher (bwrap)
// is started under a small keeper process of its own instead of as the
// sandbox's child. The keeper holds the harness's stdio in the session's
// internal directory, where a restarted sandbox finds it again:
//
// - stdout and stderr are pipes the keeper copies into the files `stdout` and
//   `stderr` (appended), which the sandbox reads as they grow, from any
//   offset. The harness never holds the files themselves: through a file it
//   held it could change its mode or set extended attributes on it, which a
//   later session reusing the folder would find (session-directories.ts);
//   a pipe is new with every session;
// - stdin comes from the FIFO `stdin`, which the keeper holds open for
//   reading and writing, so the sandbox coming and going is no end of input;
//   the keeper relays it into a pipe to the harness and closes that pipe at a
//   NUL byte (JSON lines never hold one raw): the runtime closing stdin;
// - when the harness exits the keeper writes `exit` ("<code> <signal>") and
//   exits the same way, so a live sandbox sees its child end as before.
//
// The keeper is the leader of the session's process group, as the launcher's
// own process was: SIGTERM to the group reaches the harness and leaves the
// keeper waiting (a no-op handler, which exec resets for the harness);
// SIGKILL ends it too, which ends bwrap (--die-with-parent). It has no
// parent-death signal: that is the point. But a session whose sandbox never
// comes back must not run forever: once the sandbox that owns it (its parent,
// or the pid a restarted sandbox writes to `owner`) has been gone for the
// orphan time (OZ0_SESSION_ORPHAN_MS), the keeper kills the harness. It is Perl, like the subreaper
// wrapper: perl-base is essential on Debian, and this package writes no
// native code.
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from "node:child_process";
import { EventEmitter } from "node:events";
import {
  closeSync,
  existsSync,
  lstatSync,
  openSync,
  readFileSync,
  readSync,
  watch,
  writeFileSync,
  writeSync,
  constants as fs,
  type FSWatcher,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { SESSION_NICE, SESSION_OOM_SCORE_ADJ } from "./session-precedence.js";
import { systemCommand } from "./system-command.js";

/**
 * The keeper itself, as a Perl sub: `keep($dir, $owner, $orphan_ms, $extra,
 * $read, $hold, $uid, $cwd, \%env, $in, @cmd)` never returns. `$hold`, when not
 * empty, is the file the keeper locks (flock) for the session's life: the
 * session's uid `$uid`, held while the sandbox that took it may be gone
 * (session-uid-locks.ts; the `-kept` lock). Once it holds it, the keeper
 * ends whatever the uid still runs (left by a sandbox of the node killed
 * while its session ran in the `user` mode): a child drops to the uid
 * without an exec (no process of the uid can ptrace it) and signals every
 * process of the uid, none of which can act again. `$owner` is the sandbox's pid, `$in`
 * the FIFO already open (or undef: it opens "$dir/stdin"), `$cwd` and `%env`
 * what the command runs with when the keeper did not inherit them (a spare
 * forked by the spawner, keeper-spawner.ts). The command's stdout and stderr
 * are pipes the keeper copies into the files "$dir/stdout" and
 * "$dir/stderr"; stdio entries past the third are the files "$dir/fd3",
 * "$dir/fd4", ... themselves (bwrap's --info-fd, which bwrap writes outside
 * the sandbox and never passes into it), appended to by the command. The
 * sandbox reads all of them as they grow: a spare cannot be handed a pipe of
 * the sandbox's. `$read`, when not empty, is a file the command gets open for
 * reading as the entry after those (bwrap's --seccomp program). The keeper writes `exit` once the output pipes are copied to
 * their ends, so the files are whole when the sandbox hears of the exit.
 */
export const KEEP_SUB = String.raw`
use strict; use POSIX ();
sub keep {
my ($dir, $owner, $orphan_ms, $extra, $read, $hold, $uid, $cwd, $env, $in, @cmd) = @_;
# LOCK_EX | LOCK_NB is 6 on Linux (Fcntl.pm costs more to load than the keeper to start); the fd is close-on-exec, as every
# one perl opens past stderr, so the lock goes with the keeper alone. Whoever lets such a file go removes it while still
# locking it (session-uid-locks.ts): the lock counts once the name is still the file locked.
my $held;
if ($hold ne "") {
  my $locked;
  for (1 .. 3) {
    open($held, ">>", $hold) && flock($held, 6) or last;
    my @file = stat($held); my @name = stat($hold);
    if (@name && $file[0] == $name[0] && $file[1] == $name[1]) { $locked = 1; last }
    close $held; $! = 0;
  }
  $locked or do { print STDERR "oz0 keeper: cannot hold the session's uid ($hold): ", ($! ? "$!" : "another holds it"), "\n"; POSIX::_exit(125) };
}
# Held first, so no sandbox takes the uid for another session while this one ends what the uid still runs. The killer
# is a process of the uid, which what it is to kill can stop or kill in turn: it holds no lock (the keeper's copy of the
# lock stays), and it is waited for 2 s at most, then killed as root and tried again, five times in all.
if ($uid ne "") {
  my $ended;
  for (1 .. 5) {
    my $killer = fork() // do { print STDERR "oz0 keeper: fork failed: $!\n"; POSIX::_exit(125) };
    if ($killer == 0) { close $held if $held; $) = "$uid $uid"; POSIX::setgid($uid) && POSIX::setuid($uid) && $< == $uid or POSIX::_exit(1); kill "KILL", -1; POSIX::_exit(0) }
    my $reaped = 0;
    eval { local $SIG{ALRM} = sub { die "late\n" }; alarm 2; $reaped = waitpid($killer, 0) == $killer; alarm 0 };
    alarm 0;
    if ($reaped) { if ($? == 0) { $ended = 1; last } next }
    kill "KILL", $killer; waitpid($killer, 0);
  }
  $ended or do { print STDERR "oz0 keeper: cannot end what uid $uid still runs\n"; POSIX::_exit(125) };
}
$in or open($in, "+<", "$dir/stdin") or do { print STDERR "oz0 keeper: cannot open $dir/stdin: $!\n"; POSIX::_exit(125) };
open(my $out, ">>", "$dir/stdout") or do { print STDERR "oz0 keeper: cannot open $dir/stdout: $!\n"; POSIX::_exit(125) };
open(my $err, ">>", "$dir/stderr") or do { print STDERR "oz0 keeper: cannot open $dir/stderr: $!\n"; POSIX::_exit(125) };
my @extra = map { open(my $x, ">>", "$dir/fd$_") or do { print STDERR "oz0 keeper: cannot open $dir/fd$_: $!\n"; POSIX::_exit(125) }; $x } 3 .. 2 + $extra;
if ($read ne "") { open(my $r, "<", $read) or do { print STDERR "oz0 keeper: cannot open $read: $!\n"; POSIX::_exit(125) }; push @extra, $r }
pipe(my $harnessIn, my $toHarness) or do { print STDERR "oz0 keeper: pipe failed: $!\n"; POSIX::_exit(125) };
pipe(my $fromOut, my $harnessOut) or do { print STDERR "oz0 keeper: pipe failed: $!\n"; POSIX::_exit(125) };
pipe(my $fromErr, my $harnessErr) or do { print STDERR "oz0 keeper: pipe failed: $!\n"; POSIX::_exit(125) };
%ENV = %$env if $env;
if ($cwd ne "") { chdir $cwd or do { print STDERR "oz0 keeper: cannot enter $cwd: $!\n"; POSIX::_exit(125) } }
my $harness = fork() // do { print STDERR "oz0 keeper: fork failed: $!\n"; POSIX::_exit(125) };
if ($harness == 0) {
  # The OOM killer's first choice and a low CPU priority, before anything of the session runs (session-precedence.ts);
  # the keeper keeps its own.
  if (open(my $adj, ">", "/proc/self/oom_score_adj")) { print $adj "${SESSION_OOM_SCORE_ADJ}\n"; close $adj }
  setpriority(0, 0, ${SESSION_NICE});
  open(STDIN, "<&", $harnessIn); open(STDOUT, ">&", $harnessOut); open(STDERR, ">&", $harnessErr);
  # Through fds no file holds, so placing one at 3 + i never closes another still to be placed.
  POSIX::dup2(fileno($extra[$_]), 100 + $_) for 0 .. $#extra;
  for (0 .. $#extra) { POSIX::dup2(100 + $_, 3 + $_); POSIX::close(100 + $_) }
  # A descriptor the keeper inherited open past exec (leaked by whatever started the sandbox) never reaches the session.
  if (opendir(my $fds, "/proc/self/fd")) { my @open = grep { /^\d+$/ && $_ > 2 + @extra } readdir $fds; closedir $fds; POSIX::close($_) for @open }
  exec { $cmd[0] } @cmd; print STDERR "oz0 keeper: cannot run $cmd[0]: $!\n"; POSIX::_exit(127);
}
close $harnessIn; close $harnessOut; close $harnessErr; close $_ for @extra;
open(STDIN, "<", "/dev/null"); open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null");
chdir "/";
$SIG{$_} = sub {} for qw(TERM INT HUP CHLD);
$SIG{PIPE} = "IGNORE";
# Never blocked by a harness that does not read its stdin: its output would wait meanwhile, and it may be waiting for that.
fcntl($toHarness, POSIX::F_SETFL(), fcntl($toHarness, POSIX::F_GETFL(), 0) | POSIX::O_NONBLOCK());
my ($status, $relaying, $pending, $closing, $orphaned_at, $checked) = (undef, 1, "", 0, undef, 0);
# The harness's output pipes, each with the file it is copied into.
my @copies = ([$fromOut, $out], [$fromErr, $err]);
# One read of a pipe, written whole to its file; false at the pipe's end (or when the file cannot be written: the harness then gets EPIPE).
my $copy = sub { my ($pair) = @_; my $got = sysread($pair->[0], my $data, 65536); return 1 if !defined $got && ($!{EINTR} || $!{EAGAIN}); return 0 unless $got; while (length $data) { my $n = syswrite($pair->[1], $data); if (!defined $n) { next if $!{EINTR}; return 0 } substr($data, 0, $n) = "" } 1 };
my $copy_ready = sub { my ($rout) = @_; for my $pair (@copies) { next unless vec($rout, fileno($pair->[0]), 1); next if $copy->($pair); close $pair->[0]; $pair = undef } @copies = grep { defined } @copies };
# The sandbox that owns the session: the one that started the keeper, or the one that took it over (its pid in "owner").
my $owner_alive = sub { if (open(my $o, "<", "$dir/owner")) { my $p = <$o>; $owner = $1 if defined $p && $p =~ /(\d+)/ } kill(0, $owner) || $!{EPERM} };
for (;;) {
  my $w = waitpid($harness, POSIX::WNOHANG()); if ($w == $harness) { $status = $?; last }
  # No sandbox took the session over within the orphan time: it ends (SIGKILL to bwrap ends its namespace).
  if ($orphan_ms > 0 && time() - $checked >= 1) {
    $checked = time();
    if ($owner_alive->()) { $orphaned_at = undef } else { $orphaned_at //= time(); kill "KILL", $harness if (time() - $orphaned_at) * 1000 >= $orphan_ms }
  }
  my ($rin, $win) = ("", "");
  vec($rin, fileno($_->[0]), 1) = 1 for @copies;
  if ($relaying) { if ($pending ne "") { vec($win, fileno($toHarness), 1) = 1 } else { vec($rin, fileno($in), 1) = 1 } }
  next unless select(my $rout = $rin, my $wout = $win, undef, 0.2) > 0;
  $copy_ready->($rout);
  next unless $relaying;
  if ($pending eq "" && vec($rout, fileno($in), 1)) {
    my $got = sysread($in, my $chunk, 65536);
    next unless $got;
    # The runtime closes the harness's stdin with a NUL byte (JSON lines never hold one raw).
    my $at = index($chunk, "\0");
    ($pending, $closing) = $at < 0 ? ($chunk, 0) : (substr($chunk, 0, $at), 1);
  }
  if ($pending ne "") {
    my $n = syswrite($toHarness, $pending);
    if (defined $n) { substr($pending, 0, $n) = "" } elsif (!$!{EAGAIN} && !$!{EINTR}) { ($pending, $closing) = ("", 1) }
  }
  if ($closing && $pending eq "") { close $toHarness; $relaying = 0 }
}
# What the harness wrote last may still be in the pipes: copied to their ends, which come at once (with bwrap's PID namespace
# gone nothing holds them). A process that still holds one (no namespace) is waited for a second without output, 5 s at most.
my $until = time() + 5;
while (@copies && time() < $until) {
  my $rin = ""; vec($rin, fileno($_->[0]), 1) = 1 for @copies;
  my $n = select(my $rout = $rin, undef, undef, 1);
  last if $n == 0;
  $copy_ready->($rout) if $n > 0;
}
# The session has ended: its uid's lock goes, and its file with it.
unlink $hold if $hold ne "";
my ($code, $sig) = ($status & 127) ? ("", $status & 127) : ($status >> 8, "");
if (open(my $x, ">", "$dir/exit.tmp")) { print $x "$code $sig\n"; close $x; rename "$dir/exit.tmp", "$dir/exit" }
$SIG{$_} = "DEFAULT" for qw(TERM INT HUP);
if ($sig ne "") { kill $sig, $$; POSIX::_exit(128 + $sig) }
POSIX::_exit($code);
}
`;

/** The keeper started on its own by the sandbox: its parent is its owner, and it inherited its cwd and environment. */
const KEEPER = String.raw`${KEEP_SUB}
my ($dir, $orphan_ms, $extra, $read, $hold, $uid, @cmd) = @ARGV;
keep($dir, getppid(), $orphan_ms, $extra, $read, $hold, $uid, "", undef, undef, @cmd);
`;

/** The keeper's files in a session's internal directory. */
export function keeperFiles(dir: string): { stdin: string; stdout: string; stderr: string; exit: string } {
  return {
    stdin: path.join(dir, "stdin"),
    stdout: path.join(dir, "stdout"),
    stderr: path.join(dir, "stderr"),
    exit: path.join(dir, "exit"),
  };
}

/** How the harness ended, from the keeper's `exit` file; undefined while it runs. */
export function readKeeperExit(dir: string): { code: number | null; signal: NodeJS.Signals | null } | undefined {
  let text: string;
  try {
    text = readFileSync(keeperFiles(dir).exit, "utf8");
  } catch {
    return undefined;
  }
  const [code = "", signal = ""] = text.trim().split(" ");
  return {
    code: code === "" ? null : Number(code),
    signal: signal === "" ? null : (signalName(Number(signal)) ?? "SIGKILL"),
  };
}

export function signalName(number: number): NodeJS.Signals | undefined {
  const { signals } = os.constants;
  return (Object.keys(signals) as NodeJS.Signals[]).find((name) => signals[name] === number);
}

/** What one pump reads before it lets the event loop run: a harness writing as fast as it can must not hold the sandbox. */
const PUMP_BYTES = 1024 * 1024;

/** The tails' backstop polls by period: see {@link pollEvery}. */
const polls = new Map<number, { pumps: Set<() => void>; timer: NodeJS.Timeout }>();

/**
 * The tails' backstop polls, one timer per period for every tail on it rather than one per tail: three a session
 * (stdout, stderr, bwrap's info), each waking the sandbox every second for as long as its session ran, at its own
 * moment (issue 24). Returns what takes `pump` off it again.
 */
function pollEvery(periodMs: number, pump: () => void): () => void {
  let poll = polls.get(periodMs);
  if (poll === undefined) {
    const pumps = new Set<() => void>();
    const timer = setInterval(() => {
      for (const each of pumps) each();
    }, periodMs);
    timer.unref();
    poll = { pumps, timer };
    polls.set(periodMs, poll);
  }
  const { pumps, timer } = poll;
  pumps.add(pump);
  return () => {
    pumps.delete(pump);
    if (pumps.size > 0 || polls.get(periodMs)?.timer !== timer) return;
    clearInterval(timer);
    polls.delete(periodMs);
  };
}

/**
 * A file read as it grows, from a byte offset; it ends once {@link finish}
 * was called and everything is read. Read synchronously into one scratch
 * buffer: the file is local and was just written (the page cache answers in
 * microseconds), cheaper than a thread-pool round trip and a fresh 64 KiB
 * buffer per wake, which cost the sandbox more in garbage collection than
 * the reads themselves.
 */
class FileTail extends Readable {
  readonly #path: string;
  #position: number;
  #fd: number | undefined;
  #finishing = false;
  #stopped = false;
  #pumping = false;
  readonly #watcher: FSWatcher | undefined;
  readonly #stopPolling: () => void;
  static readonly #scratch = Buffer.allocUnsafe(64 * 1024);

  constructor(file: string, position: number) {
    super();
    this.#path = file;
    this.#position = position;
    try {
      // inotify wakes the reader at once; the poll is for whatever it misses (every 250 ms without a watch).
      this.#watcher = watch(file, () => this.#pump());
      this.#watcher.on("error", () => {});
    } catch {
      this.#watcher = undefined;
    }
    this.#stopPolling = pollEvery(this.#watcher === undefined ? 250 : 1000, () => this.#pump());
  }

  override _read(): void {
    this.#pump();
  }

  /** No more will be written: read what is there, then end. */
  finish(): void {
    this.#finishing = true;
    this.#pump();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#stop();
    callback(error);
  }

  #pump(): void {
    // Called again from a reader of what it pushes: the loop running reads on to the end.
    if (this.#pumping || this.#stopped || this.destroyed) return;
    this.#pumping = true;
    try {
      this.#fd ??= openSync(this.#path, "r");
      const scratch = FileTail.#scratch;
      let pumped = 0;
      while (!this.#stopped) {
        if (pumped >= PUMP_BYTES) {
          // The rest after whatever else waits (other sessions, RPCs, heartbeats).
          setImmediate(() => this.#pump());
          return;
        }
        const bytesRead = readSync(this.#fd, scratch, 0, scratch.length, this.#position);
        if (bytesRead === 0) {
          if (this.#finishing) {
            this.#stop();
            this.push(null);
          }
          return;
        }
        this.#position += bytesRead;
        pumped += bytesRead;
        // A copy: the scratch buffer is read into again.
        if (!this.push(Buffer.from(scratch.subarray(0, bytesRead)))) return;
      }
    } catch (error) {
      this.destroy(error as Error);
    } finally {
      this.#pumping = false;
    }
  }

  #stop(): void {
    if (this.#stopped) return;
    this.#stopped = true;
    this.#watcher?.close();
    this.#stopPolling();
    if (this.#fd !== undefined) closeSync(this.#fd);
    this.#fd = undefined;
  }
}

/** The keeper's FIFO, written without ever blocking the event loop (the harness may not read). */
class FifoWriter extends Writable {
  readonly #fd: number;
  #closed = false;

  constructor(file: string) {
    // Not destroyed (closed) once ended: see _final.
    super({ autoDestroy: false });
    // Read-write: opening never waits for a reader, and the FIFO lives as long as someone holds it.
    this.#fd = openSync(file, fs.O_RDWR | fs.O_NONBLOCK);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#writeAll(chunk, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    // The keeper closes the harness's stdin at this byte. The FIFO stays open here until the session has ended
    // (KeptChild.exited): a keeper that has not opened it yet still finds what was written (a FIFO nobody holds
    // open drops what it held).
    this.#writeAll(Buffer.from([0]), callback);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#close();
    callback(error);
  }

  #writeAll(chunk: Buffer, callback: (error?: Error | null) => void): void {
    let offset = 0;
    const attempt = (): void => {
      // Closed (destroyed) while waiting for room: its fd number may be another file's by now.
      if (this.#closed) return callback(new Error("the keeper's FIFO was closed before this was written"));
      try {
        while (offset < chunk.length) offset += writeSync(this.#fd, chunk, offset);
        callback();
      } catch (error) {
        // The FIFO is full while the harness does not read: try again shortly.
        if ((error as NodeJS.ErrnoException).code === "EAGAIN") setTimeout(attempt, 10);
        else callback(error as Error);
      }
    };
    attempt();
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeSync(this.#fd);
  }
}

/**
 * The harness process as launchers and the host session see it (pid, stdio,
 * `exit`, `exitCode`/`signalCode`), whether the keeper was started by this
 * sandbox or found running by it after a restart.
 */
export class KeptChild extends EventEmitter {
  readonly pid: number | undefined;
  readonly stdin: Writable;
  readonly stdout: Readable;
  readonly stderr: Readable;
  readonly stdio: (Readable | Writable | null)[];
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  readonly #tails: FileTail[];

  constructor(options: {
    dir: string;
    pid: number | undefined;
    from: { stdout: number; stderr: number };
    /** How many stdio entries past the third the command has: the files fd3, fd4, ... read from their start. */
    extra?: number;
  }) {
    super();
    const files = keeperFiles(options.dir);
    this.pid = options.pid;
    this.stdin = new FifoWriter(files.stdin);
    const stdout = new FileTail(files.stdout, options.from.stdout);
    const stderr = new FileTail(files.stderr, options.from.stderr);
    const extra = Array.from({ length: options.extra ?? 0 }, (_, i) => new FileTail(extraFile(options.dir, i), 0));
    this.#tails = [stdout, stderr, ...extra];
    this.stdout = stdout;
    this.stderr = stderr;
    this.stdio = [this.stdin, stdout, stderr, ...extra];
  }

  /**
   * The harness has exited: its output is read to the end, then `exit` is
   * emitted. Nothing more reaches the FIFO from here: its keeper is gone,
   * and a later session reusing the folder opens it again with nothing of
   * this one's in it (a pipe's buffer goes with its last open descriptor).
   */
  exited(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    this.exitCode = code;
    this.signalCode = signal;
    this.stdin.destroy();
    for (const tail of this.#tails) tail.finish();
    this.emit("exit", code, signal);
  }

  kill(signal: NodeJS.Signals = "SIGTERM"): boolean {
    if (this.pid === undefined) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }
}

/** The file standing for stdio entry 3 + `index` of a kept command. */
export function extraFile(dir: string, index: number): string {
  return path.join(dir, `fd${3 + index}`);
}

/**
 * The keeper's output files, made before it starts so the sandbox's readers
 * can open them at once; `extra` files for the stdio entries past the third.
 */
export function createKeeperOutputs(dir: string, extra: number): void {
  const files = keeperFiles(dir);
  for (const output of [files.stdout, files.stderr, ...Array.from({ length: extra }, (_, i) => extraFile(dir, i))])
    closeSync(openSync(output, "a", 0o600));
}

/** How many stdio entries past the third a spawn asks for (bwrap's --info-fd). */
export function extraStdioCount(options: SpawnOptions): number {
  return Array.isArray(options.stdio) ? Math.max(0, options.stdio.length - 3) : 0;
}

export function perl(): string {
  const path = systemCommand("perl");
  if (path === undefined)
    throw new Error(
      "no perl in /usr/bin or /bin (Debian's perl-base): sessions cannot be kept across restarts of the sandbox",
    );
  return path;
}

/** True when this machine can keep sessions (perl and mkfifo are there). */
export function keeperAvailable(): boolean {
  try {
    perl();
    return existsSync("/usr/bin/mkfifo") || existsSync("/bin/mkfifo");
  } catch {
    return false;
  }
}

/** A session's uid as its keeper holds it: the uid, and the file it locks (SessionUserLease.keptLockFile). */
export interface KeeperHold {
  uid: number;
  file: string;
}

/** The keeper's `$hold` and `$uid` arguments: both empty without a hold. */
export function holdFields(hold: KeeperHold | undefined): [string, string] {
  return hold === undefined ? ["", ""] : [hold.file, String(hold.uid)];
}

/** What starts a keeper without forking the sandbox: a spare from the spawner, or undefined when none is ready. */
export interface SpareKeepers {
  take(options: {
    dir: string;
    orphanMs: number;
    /** The session's uid, which the keeper holds for the session's life (see KEEP_SUB); none when absent. */
    hold?: KeeperHold | undefined;
    file: string;
    args: readonly string[];
    spawn: SpawnOptions;
    /** A file the command reads at the stdio entry after the extras (bwrap's --seccomp program). */
    readFile?: string | undefined;
  }): KeptChild | undefined;
}

/**
 * A `spawn` for a launcher: starts `file args` under a keeper whose files are
 * in `dir`. Extra stdio entries past the third (bwrap's --info-fd) are the
 * files fd3, ... in `dir`; `readFile`, when given, is opened for reading as
 * the entry after them. With `spares` (keeper-spawner.ts) the keeper is
 * one of its ready forks; only when none is ready does the sandbox fork one
 * itself (a fork of this large process, and a mkfifo, in the main thread).
 */
export function keeperSpawn(options: {
  dir: string;
  orphanMs: number;
  spares?: SpareKeepers | undefined;
  /** The session's uid, which the keeper holds for the session's life, having ended what it still ran. */
  hold?: KeeperHold | undefined;
}): (file: string, args: readonly string[], options: SpawnOptions, readFile?: string) => KeptChild {
  const { dir, orphanMs, spares, hold } = options;
  return (file, args, spawnOptions, readFile) => {
    const spare = spares?.take({ dir, orphanMs, hold, file, args, spawn: spawnOptions, readFile });
    if (spare !== undefined) return spare;
    const files = keeperFiles(dir);
    // A reused folder has its FIFO still.
    if (lstatSync(files.stdin, { throwIfNoEntry: false })?.isFIFO() !== true)
      execFileSync("mkfifo", ["-m", "600", files.stdin]);
    const extra = extraStdioCount(spawnOptions);
    createKeeperOutputs(dir, extra);
    const keeper: ChildProcess = spawn(
      perl(),
      ["-e", KEEPER, dir, String(orphanMs), String(extra), readFile ?? "", ...holdFields(hold), file, ...args],
      {
        cwd: spawnOptions.cwd,
        env: spawnOptions.env,
        detached: true,
        stdio: "ignore",
      },
    );
    const kept = new KeptChild({ dir, pid: keeper.pid, from: { stdout: 0, stderr: 0 }, extra });
    keeper.on("error", (error) => kept.emit("error", error));
    keeper.on("exit", (code, signal) => kept.exited(code, signal));
    return kept;
  };
}

/**
 * Ends a kept session no sandbox will own (its takeover was refused): SIGKILL to its keeper, when that pid is still
 * the keeper (by its start time), ends bwrap (--die-with-parent), and with it the namespace's every process.
 * Resolves once the keeper and the namespace's init are gone (or after `waitMs`), so nothing of the session still
 * runs when its directories are removed.
 */
export async function endKeptSession(options: {
  keeper: { pid: number; startTime: string };
  initPid: number | undefined;
  waitMs?: number;
}): Promise<void> {
  const { keeper, initPid } = options;
  if (!runs(keeper.pid, keeper.startTime)) return;
  try {
    process.kill(keeper.pid, "SIGKILL");
  } catch {
    return; // gone meanwhile
  }
  const until = Date.now() + (options.waitMs ?? 5_000);
  const initStart = initPid !== undefined ? processStartTime(initPid) : undefined;
  while (Date.now() < until) {
    const initRuns = initPid !== undefined && initStart !== undefined && runs(initPid, initStart);
    if (!runs(keeper.pid, keeper.startTime) && !initRuns) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Whether `pid` is the process that started at `startTime` and is not a zombie. */
function runs(pid: number, startTime: string): boolean {
  const stat = processStat(pid);
  return stat?.startTime === startTime && stat.state !== "Z" && stat.state !== "X";
}

/** The start time of `pid` in clock ticks since boot (/proc/<pid>/stat), telling a process from a later one with its pid. */
export function processStartTime(pid: number): string | undefined {
  return processStat(pid)?.startTime;
}

/** `pid`'s state letter and start time from /proc/<pid>/stat (the fields after the command, which may hold spaces). */
function processStat(pid: number): { state: string | undefined; startTime: string | undefined } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { state: fields[0], startTime: fields[19] };
  } catch {
    return undefined;
  }
}

/**
 * The keeper of a session a previous run of the sandbox started, found again:
 * its output is read from the given offsets, and it counts as exited when its
 * `exit` file appears, or when it is gone without one (it was killed).
 */
export function adoptKeeper(options: {
  dir: string;
  pid: number;
  startTime: string;
  from: { stdout: number; stderr: number };
}): KeptChild {
  // The keeper ends an orphaned session unless its owner lives: this sandbox owns it now.
  writeFileSync(path.join(options.dir, "owner"), `${process.pid}\n`, { mode: 0o600 });
  const kept = new KeptChild({ dir: options.dir, pid: options.pid, from: options.from });
  followKeeperExit(kept, { dir: options.dir, pid: options.pid, startTime: options.startTime });
  return kept;
}

/**
 * Tells `kept` its end when the keeper is not this process's child (taken
 * over, or its spawner gone): its `exit` file appears, or the keeper is gone
 * without one (it was killed).
 */
export function followKeeperExit(
  kept: KeptChild,
  keeper: { dir: string; pid: number; startTime: string | undefined },
): void {
  const check = (): void => {
    const ended = readKeeperExit(keeper.dir);
    if (ended !== undefined) return finish(ended.code, ended.signal);
    if (processStartTime(keeper.pid) !== keeper.startTime) {
      // Gone without writing its exit: it was killed (the harness with it, by --die-with-parent).
      if (readKeeperExit(keeper.dir) === undefined) finish(null, "SIGKILL");
    }
  };
  const poll = setInterval(check, 200);
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(keeper.dir, (_event, name) => {
      if (name === "exit") check();
    });
    watcher.on("error", () => {});
  } catch {
    watcher = undefined;
  }
  const finish = (code: number | null, signal: NodeJS.Signals | null): void => {
    clearInterval(poll);
    watcher?.close();
    kept.exited(code, signal);
  };
  queueMicrotask(check);
}
