#!/usr/bin/env node
// The llm-proxy process: environment in, startLlmProxy, SIGTERM out.
import { configFromEnvOrExit, createLogger, onShutdownSignal, startTelemetry } from "@oz0/serving";
import { startLlmProxy } from "./index.js";
import { configFromEnv } from "./llm-proxy-config.js";

const logger = createLogger({ name: "llm-proxy" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-llm-proxy" });
try {
  // A malformed variable stops here, named, with exit code 2, before anything listens.
  const config = configFromEnvOrExit("oz0-llm-proxy", () => configFromEnv(process.env));
  const proxy = await startLlmProxy({ ...config, logger });
  onShutdownSignal(logger, async () => {
    await proxy.close();
    // Flush the spans and metrics of the last work before the process exits.
    await telemetry.shutdown();
  });
} catch (error) {
  logger.fatal({ message: (error as Error).message }, "llm-proxy could not start");
  process.exitCode = 1;
}
