// SIGTERM and SIGINT run the shutdown once; a second signal exits at once.
import type { Logger } from "./logger.js";

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
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, "shutdown failed");
        process.exit(1);
      },
    );
  };
  process.on("SIGTERM", handle);
  process.on("SIGINT", handle);
}
