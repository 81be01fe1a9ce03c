// Structured JSON logs on stderr, one object per line, for every service.
import pino, { type Logger } from "pino";

export type { Logger };

export interface LoggerOptions {
  /** The service or component name, as the `service` field of every line. */
  name: string;
  /** Defaults to OZ0_LOG_LEVEL, else `info`. */
  level?: string;
}

/**
 * How long an exiting process keeps retrying a stderr whose reader stopped
 * reading. pino flushes synchronously on exit and by default retries a full
 * pipe forever, blocking the only thread: the process could then never exit,
 * not even on SIGTERM (its handler never runs). Past this, what is left is
 * dropped and the process exits.
 */
const EXIT_FLUSH_PATIENCE_MS = 2_000;
/** When the exiting process first found stderr full; unset while it is not exiting. */
let exitBlockedSince: number | undefined;
let exiting = false;

function retryWrite(): boolean {
  // While running, writes are retried from the event loop (nothing blocks): keep them.
  if (!exiting) return true;
  exitBlockedSince ??= Date.now();
  return Date.now() - exitBlockedSince < EXIT_FLUSH_PATIENCE_MS;
}

let exitWatched = false;
const destinations = new Set<ReturnType<typeof pino.destination>>();

/** Runs before pino's own exit flush (prepended), so the bounded retry applies to it. */
function watchExit(): void {
  if (exitWatched) return;
  exitWatched = true;
  process.prependListener("exit", () => {
    exiting = true;
    for (const destination of destinations) {
      try {
        destination.flushSync();
      } catch {
        // The reader never made room: drop what is left, so pino's flush after this one finds nothing to do.
        try {
          destination.destroy();
        } catch {
          // Destroyed already: nothing is left to drop.
        }
      }
    }
  });
}

export function createLogger(options: LoggerOptions): Logger {
  watchExit();
  const destination = pino.destination({ fd: 2, sync: false, retryEAGAIN: retryWrite });
  destinations.add(destination);
  destination.on("close", () => destinations.delete(destination));
  return pino(
    {
      name: options.name,
      level: options.level ?? process.env.OZ0_LOG_LEVEL ?? "info",
      base: { service: options.name },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}
