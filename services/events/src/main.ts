#!/usr/bin/env node
// oz0-events: the events service as a process, configured from the environment.
import { configFromEnvOrExit, createLogger, onShutdownSignal, startTelemetry } from "@oz0/serving";
import { configFromEnv } from "./events-config.js";
import { startEvents } from "./start-events.js";

const logger = createLogger({ name: "events" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-events" });

try {
  // A malformed variable stops here, named, with exit code 2, before anything listens.
  const config = configFromEnvOrExit("oz0-events", () => configFromEnv(process.env));
  const events = await startEvents({ ...config, logger });
  onShutdownSignal(logger, async () => {
    await events.close();
    // Flush the spans and metrics of the last work before the process exits.
    await telemetry.shutdown();
  });
} catch (error) {
  logger.fatal({ err: error }, "events failed to start");
  process.stderr.write(`oz0-events: ${(error as Error).message}\n`);
  process.exit(1);
}
