// Ending a Node process at once without the hang of nodejs/node#54918.
// process.exit() joins V8's worker threads while the isolate still runs. A
// worker in the middle of a Maglev compile that needs a garbage collection
// waits for the main thread to run one, and the main thread waits for the
// worker: neither moves again, and the process never exits (still open in
// Node 24; a test file of this project hung so in 2 runs of 80). A harness
// that hangs so is reported `did_not_exit` and killed after its grace; a CLI
// that hangs so hangs the script that ran it.
// execve(2) ends every other thread at once, so nothing is joined: the
// process becomes `sh -c 'exit N'`, which exits with the same code. It is
// made from process.reallyExit, which process.exit calls last: every 'exit'
// listener has run by then, and so have the callbacks of signal-exit (which
// wraps process.emit; proper-lockfile, execa and write-file-atomic clean up
// through it). What Node does at a normal exit beyond that is done here
// first for stdio (ResetStdio: stdout, stderr and stdin blocking again, a
// terminal out of raw mode), so a pipe this process shared stays as its other
// writers expect. Node's other native at-exit work (a --cpu-prof profile,
// coverage) is lost, so a process started with those exits Node's way. A
// failed execve aborts Node, so it is made only when /bin/sh can be run.
import { accessSync, constants } from "node:fs";
import type { ReadStream } from "node:tty";
import { isMainThread } from "node:worker_threads";

const SHELL = "/bin/sh";

/** process.reallyExit: undocumented, what process.exit calls once the 'exit' listeners have run. */
type ReallyExit = (code?: number | string | null) => never;
type Exiting = NodeJS.Process & { reallyExit: ReallyExit };

/**
 * Exits as `process.exit(code)` does (its 'exit' listeners run, and the exit
 * code is theirs to change), but ends by replacing the process with
 * `/bin/sh -c 'exit N'`, so that Node's teardown cannot hang the exit.
 * Where that cannot be done (not Linux, a worker thread, a Node without
 * `process.execve`, no `/bin/sh` to run, profiling or coverage on), it is
 * `process.exit(code)`.
 */
export function exitProcess(code?: number): never {
  const exiting = process as Exiting;
  const nodeExit = exiting.reallyExit;
  if (execveExitPossible()) exiting.reallyExit = execveExit(nodeExit);
  try {
    // process.exit(undefined) would clear an exit code set beforehand: pass on only what was given.
    if (code === undefined) process.exit();
    process.exit(code);
  } finally {
    // Reached only when process.exit threw (a code that is not an integer): nothing is left changed.
    exiting.reallyExit = nodeExit;
  }
}

/**
 * From now on every `process.exit()` of this process ends as
 * {@link exitProcess} does: for a process that exits in many places it does
 * not own (a test runner and its files, a script's libraries). False where
 * it cannot be done (the cases exitProcess lists), and exits stay Node's.
 */
export function installExitByExecve(): boolean {
  if (!execveExitPossible()) return false;
  const exiting = process as Exiting;
  exiting.reallyExit = execveExit(exiting.reallyExit);
  return true;
}

/** Whether this process can end by execve: Linux, its main thread, a Node with it, a shell to run, nothing of Node's to write at exit. */
function execveExitPossible(): boolean {
  // process.execve: in Node from 22.15 and 23.11.
  return (
    process.platform === "linux" && isMainThread && process.execve !== undefined && !nativeExitWork() && shellRuns()
  );
}

/** A process.reallyExit that leaves stdio as Node's exit would, then becomes `sh -c 'exit N'`. */
function execveExit(nodeExit: ReallyExit): ReallyExit {
  const execve = process.execve!;
  return (status) => {
    restoreStdio();
    // An exit status is one byte, as exit(3) would keep of it.
    execve.call(process, SHELL, ["sh", "-c", `exit ${Number(status ?? 0) & 0xff}`], {});
    // Not reached: execve returns only by aborting. Here for the type (never), and should Node change that.
    return nodeExit.call(process, status);
  };
}

/** Whether /bin/sh is there to run: an execve that fails aborts the process. */
function shellRuns(): boolean {
  try {
    accessSync(SHELL, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** What Node's ResetStdio does at a normal exit, which an execve skips: blocking stdio, a terminal not raw. */
function restoreStdio(): void {
  for (const stream of [process.stdin, process.stdout, process.stderr]) {
    try {
      if ((stream as Partial<ReadStream>).isRaw) (stream as ReadStream).setRawMode(false);
      // libuv's, as Node's own stdio uses it (stdout and stderr on pipes, which Node left non-blocking).
      (stream as { _handle?: { setBlocking?: (blocking: boolean) => void } })._handle?.setBlocking?.(true);
    } catch {
      // A stream already closed: nothing to restore.
    }
  }
}

/** Whether Node has work to do at exit that an execve would lose: a CPU or heap profile, coverage. */
function nativeExitWork(): boolean {
  // The flags themselves: a process may carry --cpu-prof-interval and the like with no profile on (node --test
  // gives each file's process every option's default).
  const flags = [...process.execArgv, ...(process.env.NODE_OPTIONS ?? "").split(/\s+/)];
  return flags.some((flag) => PROFILING_FLAGS.has(flag)) || process.env.NODE_V8_COVERAGE !== undefined;
}

/** The flags that have Node write a profile at exit. */
const PROFILING_FLAGS = new Set(["--cpu-prof", "--heap-prof", "--prof"]);
