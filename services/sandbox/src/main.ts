#!/usr/bin/env node
// The sandbox process: configuration from the environment, SIGTERM = graceful shutdown.
import { createLogger, onShutdownSignal } from "@oz0/serving";
import { configFromEnv, startSandbox } from "./index.js";

const logger = createLogger({ name: "sandbox" });
try {
  const sandbox = await startSandbox({ ...configFromEnv(process.env), logger });
  onShutdownSignal(logger, () => sandbox.close());
} catch (error) {
  logger.fatal({ err: error }, "the sandbox could not start");
  process.exitCode = 1;
}
