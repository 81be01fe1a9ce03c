// Structured JSON logs on stderr, one object per line, for every service.
import pino, { type Logger } from "pino";

export type { Logger };

export interface LoggerOptions {
  /** The service or component name, as the `service` field of every line. */
  name: string;
  /** Defaults to OZ0_LOG_LEVEL, else `info`. */
  level?: string;
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
    pino.destination({ fd: 2, sync: false }),
  );
}
