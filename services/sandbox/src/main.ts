#!/usr/bin/env node
// The sandbox process: configuration from the environment, SIGTERM = graceful shutdown.
import {
  closeInheritedDescriptors,
  configFromEnvOrExit,
  createLogger,
  onShutdownSignal,
  startTelemetry,
} from "@oz0/serving";
import { configFromEnv, startSandbox } from "./index.js";

const logger = createLogger({ name: "sandbox" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-sandbox" });
try {
  // A malformed variable stops here, named, with exit code 2, before anything listens.
  const config = configFromEnvOrExit("oz0-sandbox", () => configFromEnv(process.env));
  // What its starter left open must not reach its sessions' harnesses; after the configuration, so that a
  // malformed variable's error is all a failed start says.
  closeInheritedDescriptors(logger);
  const sandbox = await startSandbox({ ...config, logger });
  onShutdownSignal(logger, async () => {
    await sandbox.close();
    // Flush the spans and metrics of the last work before the process exits.
    await telemetry.shutdown();
  });
} catch (error) {
  logger.fatal({ err: error }, "the sandbox could not start");
  process.exitCode = 1;
}
