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
// The exit is the harness SDK's (`exitProcess`, which its harnesses and the
// oz0 CLI use), installed here for every exit of the process: its 'exit'
// listeners run first, and where Node has work of its own at exit (a CPU
// profile, coverage) or in a worker, the exit stays Node's. `npm test` and
// `npm start` build the SDK before they get here.
let install;
try {
  ({ installExitByExecve: install } = await import("@oz0/harness/exit"));
} catch (error) {
  console.error(`@oz0/harness is not built (${error.message}); run \`npm run build\` first`);
  process.exit(1);
}
install();
