// What lets a session outlive a crash of the sandbox (conmon and
// containerd-shim do the same for containers): the harness's launcher (bwrap)
// is started under a small keeper process of its own instead of as the
// sandbox's child. The keeper holds the harness's stdio in the session's
// internal directory, where a restarted sandbox finds it again:
//
// - stdout and stderr go to the files `stdout` and `stderr` (appended), which
//   the sandbox reads as they grow, from any offset;
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
  openSync,
  readFileSync,
  watch,
  writeFileSync,
  writeSync,
  constants as fs,
  type FSWatcher,
} from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { perlCommand } from "./perl-command.js";

const KEEPER = String.raw`
use strict; use POSIX ();
my ($dir, $orphan_ms, $extra, @cmd) = @ARGV;
my $owner = getppid();
open(my $in, "+<", "$dir/stdin") or do { print STDERR "oz0 keeper: cannot open $dir/stdin: $!\n"; exit 125 };
open(my $out, ">>", "$dir/stdout") or do { print STDERR "oz0 keeper: cannot open $dir/stdout: $!\n"; exit 125 };
open(my $err, ">>", "$dir/stderr") or do { print STDERR "oz0 keeper: cannot open $dir/stderr: $!\n"; exit 125 };
pipe(my $harnessIn, my $toHarness) or do { print STDERR "oz0 keeper: pipe failed: $!\n"; exit 125 };
my $harness = fork() // do { print STDERR "oz0 keeper: fork failed: $!\n"; exit 125 };
if ($harness == 0) {
  open(STDIN, "<&", $harnessIn); open(STDOUT, ">&", $out); open(STDERR, ">&", $err);
  exec { $cmd[0] } @cmd; print STDERR "oz0 keeper: cannot run $cmd[0]: $!\n"; POSIX::_exit(127);
}
close $harnessIn; close $out; close $err;
POSIX::close($_) for 3 .. 2 + $extra;
open(STDIN, "<", "/dev/null"); open(STDOUT, ">", "/dev/null"); open(STDERR, ">", "/dev/null");
chdir "/";
$SIG{$_} = sub {} for qw(TERM INT HUP CHLD);
$SIG{PIPE} = "IGNORE";
my ($status, $relaying, $orphaned_at, $checked) = (undef, 1, undef, 0);
# The sandbox that owns the session: the one that started the keeper, or the one that took it over (its pid in "owner").
sub owner_alive { if (open(my $o, "<", "$dir/owner")) { my $p = <$o>; $owner = $1 if defined $p && $p =~ /(\d+)/ } kill(0, $owner) || $!{EPERM} }
sub relay { my ($data) = @_; while (length $data) { my $n = syswrite($toHarness, $data); if (!defined $n) { next if $!{EINTR}; return 0 } substr($data, 0, $n) = "" } 1 }
for (;;) {
  my $w = waitpid($harness, POSIX::WNOHANG()); if ($w == $harness) { $status = $?; last }
  # No sandbox took the session over within the orphan time: it ends (SIGKILL to bwrap ends its namespace).
  if ($orphan_ms > 0 && time() - $checked >= 1) {
    $checked = time();
    if (owner_alive()) { $orphaned_at = undef } else { $orphaned_at //= time(); kill "KILL", $harness if (time() - $orphaned_at) * 1000 >= $orphan_ms }
  }
  if (!$relaying) { select(undef, undef, undef, 0.2); next }
  my $rin = ""; vec($rin, fileno($in), 1) = 1;
  next unless select(my $rout = $rin, undef, undef, 0.2) > 0;
  my $got = sysread($in, my $chunk, 65536);
  next unless $got;
  my $at = index($chunk, "\0");
  my $ok = relay($at < 0 ? $chunk : substr($chunk, 0, $at));
  if (!$ok || $at >= 0) { close $toHarness; $relaying = 0 }
}
my ($code, $sig) = ($status & 127) ? ("", $status & 127) : ($status >> 8, "");
if (open(my $x, ">", "$dir/exit.tmp")) { print $x "$code $sig\n"; close $x; rename "$dir/exit.tmp", "$dir/exit" }
$SIG{$_} = "DEFAULT" for qw(TERM INT HUP);
if ($sig ne "") { kill $sig, $$; exit 128 + $sig }
exit $code;
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

function signalName(number: number): NodeJS.Signals | undefined {
  const { signals } = os.constants;
  return (Object.keys(signals) as NodeJS.Signals[]).find((name) => signals[name] === number);
}

/** A file read as it grows, from a byte offset; it ends once {@link finish} was called and everything is read. */
class FileTail extends Readable {
  readonly #path: string;
  #position: number;
  #file: FileHandle | undefined;
  #pumping = false;
  #again = false;
  #finishing = false;
  readonly #watcher: FSWatcher | undefined;
  readonly #poll: NodeJS.Timeout;

  constructor(file: string, position: number) {
    super();
    this.#path = file;
    this.#position = position;
    try {
      // inotify wakes the reader at once; the poll is for whatever it misses.
      this.#watcher = watch(file, () => this.#wake());
      this.#watcher.on("error", () => {});
    } catch {
      this.#watcher = undefined;
    }
    this.#poll = setInterval(() => this.#wake(), 250);
    this.#poll.unref();
  }

  override _read(): void {
    this.#wake();
  }

  /** No more will be written: read what is there, then end. */
  finish(): void {
    this.#finishing = true;
    this.#wake();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#stop();
    callback(error);
  }

  #wake(): void {
    if (this.#pumping) {
      this.#again = true;
      return;
    }
    this.#pump().then(undefined, (error: unknown) => this.destroy(error as Error));
  }

  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      this.#file ??= await open(this.#path, "r");
      do {
        this.#again = false;
        for (;;) {
          if (this.destroyed) return;
          const buffer = Buffer.allocUnsafe(64 * 1024);
          const { bytesRead } = await this.#file.read(buffer, 0, buffer.length, this.#position);
          if (bytesRead === 0) {
            if (this.#finishing && !this.#again) {
              this.#stop();
              this.push(null);
              return;
            }
            break;
          }
          this.#position += bytesRead;
          if (!this.push(buffer.subarray(0, bytesRead))) return;
        }
      } while (this.#again);
    } finally {
      this.#pumping = false;
    }
  }

  #stop(): void {
    this.#watcher?.close();
    clearInterval(this.#poll);
    const file = this.#file;
    this.#file = undefined;
    file?.close().then(undefined, () => {});
  }
}

/** The keeper's FIFO, written without ever blocking the event loop (the harness may not read). */
class FifoWriter extends Writable {
  readonly #fd: number;
  #closed = false;

  constructor(file: string) {
    super();
    // Read-write: opening never waits for a reader, and the FIFO lives as long as someone holds it.
    this.#fd = openSync(file, fs.O_RDWR | fs.O_NONBLOCK);
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.#writeAll(chunk, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    // The keeper closes the harness's stdin at this byte.
    this.#writeAll(Buffer.from([0]), (error) => {
      this.#close();
      callback(error);
    });
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#close();
    callback(error);
  }

  #writeAll(chunk: Buffer, callback: (error?: Error | null) => void): void {
    let offset = 0;
    const attempt = (): void => {
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
    extraStdio?: (Readable | Writable | null)[];
  }) {
    super();
    const files = keeperFiles(options.dir);
    this.pid = options.pid;
    this.stdin = new FifoWriter(files.stdin);
    const stdout = new FileTail(files.stdout, options.from.stdout);
    const stderr = new FileTail(files.stderr, options.from.stderr);
    this.#tails = [stdout, stderr];
    this.stdout = stdout;
    this.stderr = stderr;
    this.stdio = [this.stdin, stdout, stderr, ...(options.extraStdio ?? [])];
  }

  /** The harness has exited: its output is read to the end, then `exit` is emitted. */
  exited(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    this.exitCode = code;
    this.signalCode = signal;
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

function perl(): string {
  const path = perlCommand();
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

/**
 * A `spawn` for a launcher: starts `file args` under a keeper whose files are
 * in `dir`. Extra stdio entries past the third (bwrap's --info-fd pipe) are
 * passed through to the command.
 */
export function keeperSpawn(options: {
  dir: string;
  orphanMs: number;
}): (file: string, args: readonly string[], options: SpawnOptions) => KeptChild {
  const { dir, orphanMs } = options;
  return (file, args, options) => {
    const files = keeperFiles(dir);
    execFileSync("mkfifo", ["-m", "600", files.stdin]);
    for (const output of [files.stdout, files.stderr]) closeSync(openSync(output, "a", 0o600));
    const extra = Array.isArray(options.stdio) ? options.stdio.slice(3) : [];
    const keeper: ChildProcess = spawn(
      perl(),
      ["-e", KEEPER, dir, String(orphanMs), String(extra.length), file, ...args],
      {
        cwd: options.cwd,
        env: options.env,
        detached: true,
        stdio: ["ignore", "ignore", "ignore", ...extra],
      },
    );
    const kept = new KeptChild({
      dir,
      pid: keeper.pid,
      from: { stdout: 0, stderr: 0 },
      extraStdio: keeper.stdio.slice(3) as (Readable | Writable | null)[],
    });
    keeper.on("error", (error) => kept.emit("error", error));
    keeper.on("exit", (code, signal) => kept.exited(code, signal));
    return kept;
  };
}

/** The start time of `pid` in clock ticks since boot (/proc/<pid>/stat), telling a process from a later one with its pid. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
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
  const check = (): void => {
    const ended = readKeeperExit(options.dir);
    if (ended !== undefined) return finish(ended.code, ended.signal);
    if (processStartTime(options.pid) !== options.startTime) {
      // Gone without writing its exit: it was killed (the harness with it, by --die-with-parent).
      if (readKeeperExit(options.dir) === undefined) finish(null, "SIGKILL");
    }
  };
  const poll = setInterval(check, 200);
  let watcher: FSWatcher | undefined;
  try {
    watcher = watch(options.dir, (_event, name) => {
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
  return kept;
}
