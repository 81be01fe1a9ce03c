// SIGTERM and SIGINT run the shutdown once; a second signal exits at once.
//
// A shutdown that finished ends the process the way a script ends: its event
// loop empties, and Node disposes of V8 before it joins V8's worker threads.
// Not by process.exit(), which joins those threads while V8 still runs, and
// hangs for good when one of them waits for a garbage collection only the
// main thread could run (nodejs/node#54918, open in Node 24): the service
// asked to stop would hold its port and its place until killed. Ending this
// way also runs Node's own at-exit work (a --cpu-prof profile is written).
// Whatever still holds the event loop after the shutdown (a handle it left
// open) is logged by kind, and the process then exits anyway.
import type { Logger } from "./logger.js";

/** How long a finished shutdown waits for the event loop to empty before it exits anyway. */
export const SHUTDOWN_LINGER_MS = 2_000;

export function onShutdownSignal(logger: Logger, shutdown: (signal: NodeJS.Signals) => Promise<void>): void {
  let started = false;
  const handle = (signal: NodeJS.Signals): void => {
    if (started) {
      logger.warn({ signal }, "second signal: exiting now");
      process.exit(1);
    }
    started = true;
    logger.info({ signal }, "shutting down");
    shutdown(signal).then(
      () => endOnceIdle(logger),
      (error: unknown) => {
        logger.error({ err: error }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handle);
  process.on("SIGINT", handle);
}

function endOnceIdle(logger: Logger): void {
  process.exitCode = 0;
  // Unref'd: it ends the process only if something else still holds it.
  setTimeout(() => {
    const open = process.getActiveResourcesInfo();
    // This timer is one of them.
    const own = open.indexOf("Timeout");
    if (own >= 0) open.splice(own, 1);
    logger.warn({ open }, `still running ${SHUTDOWN_LINGER_MS} ms after shutting down: exiting anyway`);
    process.exit(0);
  }, SHUTDOWN_LINGER_MS).unref();
}
