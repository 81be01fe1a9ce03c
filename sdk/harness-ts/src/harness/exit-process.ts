// Ending a Node process at once without the hang of nodejs/node#54918.
// process.exit() joins V8's worker threads while the isolate still runs. A
// worker in the middle of a Maglev compile that needs a garbage collection
// waits for the main thread to run one, and the main thread waits for the
// worker: neither moves again, and the process never exits (still open in
// Node 24; a test file of this project hung so in 2 runs of 80). A harness
// that hangs so is reported `did_not_exit` and killed after its grace; a CLI
// that hangs so hangs the script that ran it.
// execve(2) ends every other thread at once, so nothing is joined: the
// process becomes `sh -c 'exit N'`, which exits with the same code. The
// process's 'exit' listeners have run by then; Node's native at-exit work
// (a --cpu-prof profile, coverage) does not, so a process started with those
// options exits Node's way.
import { isMainThread } from "node:worker_threads";

/**
 * Exits as `process.exit(code)` does (its 'exit' listeners run, and the exit
 * code is theirs to change), but ends by replacing the process with
 * `/bin/sh -c 'exit N'`, so that Node's teardown cannot hang the exit.
 * Where that cannot be done (not Linux, a worker thread, a Node without
 * `process.execve`, no `/bin/sh`, profiling or coverage on), it is
 * `process.exit(code)`.
 */
export function exitProcess(code?: number): never {
  // process.execve: in Node from 22.15 and 23.11.
  const execve = process.execve;
  if (process.platform === "linux" && isMainThread && execve !== undefined && !nativeExitWork()) {
    // Registered now, so it runs after every other 'exit' listener.
    process.once("exit", () => {
      // An exit status is one byte, as exit(3) would keep of it.
      const status = Number(process.exitCode ?? 0) & 0xff;
      try {
        execve.call(process, "/bin/sh", ["sh", "-c", `exit ${status}`], {});
      } catch {
        // No /bin/sh, or exec refused (a sandbox's rules): Node's own exit, rather than none.
      }
    });
  }
  // process.exit(undefined) would clear an exit code set beforehand: pass on only what was given.
  if (code === undefined) process.exit();
  process.exit(code);
}

/** Whether Node has work to do at exit that an execve would lose: a CPU or heap profile, coverage. */
function nativeExitWork(): boolean {
  const flags = [...process.execArgv, process.env.NODE_OPTIONS ?? ""].join(" ");
  return /--(cpu-prof|heap-prof|prof)\b/.test(flags) || process.env.NODE_V8_COVERAGE !== undefined;
}
