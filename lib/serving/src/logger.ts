// Structured JSON logs on stderr, one object per line, for every service.
import pino, { type Logger } from "pino";
import sonicBoom from "sonic-boom";

// sonic-boom is CommonJS (`module.exports = SonicBoom`) while its types declare a default export: under NodeNext the
// default import is the constructor at run time but typed as the module.
const SonicBoom = sonicBoom as unknown as typeof sonicBoom.SonicBoom;

export type { Logger };

export interface LoggerOptions {
  /** The service or component name, as the `service` field of every line. */
  name: string;
  /** Defaults to OZ0_LOG_LEVEL, else `info`. */
  level?: string;
}

/**
 * How long a synchronous flush (at exit, or after a fatal line) keeps retrying
 * a stderr whose reader stopped reading. It blocks the only thread: retrying a
 * full pipe forever, the process could never exit, not even on SIGTERM (its
 * handler never runs). Past this, what is left is dropped.
 */
const SYNC_FLUSH_PATIENCE_MS = 2_000;
/** Set while a synchronous flush runs: when it first found stderr full, once it has. */
let syncFlush: { blockedSince?: number } | undefined;

function retryWrite(): boolean {
  // Written from the event loop (nothing blocks): keep retrying.
  if (!syncFlush) return true;
  syncFlush.blockedSince ??= Date.now();
  return Date.now() - syncFlush.blockedSince < SYNC_FLUSH_PATIENCE_MS;
}

/**
 * Where the services' lines go: stderr, written from the event loop. Built
 * here rather than with `pino.destination` for sonic-boom 5, whose exit flush
 * gives up on a pipe whose reader is gone (EPIPE: the parent that read it was
 * killed). Version 4, which pino bundles, retried that forever, sleeping, so a
 * service whose parent died hung in its exit after SIGTERM.
 */
class StderrDestination {
  readonly #boom = new SonicBoom({ fd: 2, sync: false, retryEAGAIN: retryWrite });
  /** The reader is gone or stderr broke: nothing written any more could arrive. */
  #broken = false;

  constructor() {
    // A logger must never throw at its caller, nor crash the process, because stderr failed.
    this.#boom.on("error", () => (this.#broken = true));
  }

  write(line: string): void {
    if (!this.#broken) this.#boom.write(line);
  }

  /**
   * Writes what is waiting now, blocking (pino calls it after a fatal line, and the exit does); drops it if stderr
   * cannot take it: broken, or full for longer than SYNC_FLUSH_PATIENCE_MS.
   */
  flushSync(): void {
    if (this.#broken) return;
    syncFlush = {};
    try {
      this.#boom.flushSync();
    } catch {
      this.#broken = true;
    } finally {
      syncFlush = undefined;
    }
  }
}

/** One per process: loggers that each wrote fd 2 from the event loop could interleave long lines. */
let stderrDestination: StderrDestination | undefined;

function sharedStderr(): StderrDestination {
  if (!stderrDestination) {
    const destination = new StderrDestination();
    process.on("exit", () => destination.flushSync());
    stderrDestination = destination;
  }
  return stderrDestination;
}

export function createLogger(options: LoggerOptions): Logger {
  return pino(
    {
      name: options.name,
      level: options.level ?? process.env.OZ0_LOG_LEVEL ?? "info",
      base: { service: options.name },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    sharedStderr(),
  );
}
