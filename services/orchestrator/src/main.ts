#!/usr/bin/env node
// oz0-orchestrator: the orchestrator as a process, configured from the environment.
import {
  closeInheritedDescriptors,
  configFromEnvOrExit,
  createLogger,
  onShutdownSignal,
  startTelemetry,
} from "@oz0/serving";
import { configFromEnv } from "./orchestrator-config.js";
import { startOrchestrator } from "./start-orchestrator.js";

const logger = createLogger({ name: "orchestrator" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-orchestrator" });

try {
  // A malformed variable stops here, named, with exit code 2, before anything listens.
  const config = configFromEnvOrExit("oz0-orchestrator", () => configFromEnv(process.env));
  // What its starter left open must not reach its command hooks; after the configuration, so that a
  // malformed variable's error is all a failed start says.
  closeInheritedDescriptors(logger);
  const orchestrator = await startOrchestrator({ ...config, logger });
  onShutdownSignal(logger, async () => {
    await orchestrator.close();
    // Flush the spans and metrics of the last work before the process exits.
    await telemetry.shutdown();
  });
} catch (error) {
  logger.fatal({ err: error }, "orchestrator failed to start");
  process.stderr.write(`oz0-orchestrator: ${(error as Error).message}\n`);
  process.exit(1);
}
