// Imported (`--import`) into the test runner's process and, through it, into
// every test file's process, and imported by run-tests.mjs and start-demo.mjs
// (`npm test`, `npm start`): process.exit() ends the process by replacing it
// with `sh -c 'exit N'` (execve), not by Node's own teardown.
// Why: Node's process.exit() joins V8's worker threads while the isolate is
// still alive. A worker in the middle of a Maglev compile that needs a garbage
// collection waits for the main thread to run one, and the main thread waits
// for the worker: neither ever moves (nodejs/node#54918, open in Node 24). CI
// of f1d6951 ran out its 90 minutes in one such process: request-body.test.ts
// had reported every test passed and never exited (the runner's forced exit
// is a process.exit()). A loop of that file alone hung in 2 of 80 runs. gdb
// showed the main thread in NodePlatform::Shutdown's join and the V8 worker
// in CollectionBarrier::AwaitCollectionBackground.
// execve(2) ends every other thread at once, so there is nothing to join. The
// process's 'exit' listeners have run by then (process.exit emits 'exit', then
// calls process.reallyExit, the undocumented hook replaced here, which
// nyc and signal-exit also wrap); Node's native at-exit hooks do not run, and
// the test runs use none (no --cpu-prof, no coverage). stdout and stderr
// block (blocking-stdio.mjs), so nothing written is still queued.
import { isMainThread } from "node:worker_threads";

const nodeExit = process.reallyExit;

if (isMainThread && process.platform === "linux") {
  process.reallyExit = (code) => {
    try {
      // An exit status is one byte, as exit(3) would keep of it.
      process.execve("/bin/sh", ["sh", "-c", `exit ${Number(code) & 0xff}`], {});
    } catch {
      // No /bin/sh: Node's own exit, deadlock and all, rather than none.
    }
    nodeExit.call(process, code);
  };
}
