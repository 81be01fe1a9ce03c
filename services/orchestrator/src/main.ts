#!/usr/bin/env node
// oz0-orchestrator: the orchestrator as a process, configured from the environment.
import { authSettingsFromEnv, createLogger, onShutdownSignal, startTelemetry } from "@oz0/serving";
import { startOrchestrator } from "./start-orchestrator.js";

const logger = createLogger({ name: "orchestrator" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-orchestrator" });
const list = (value: string | undefined): string[] => (value ?? "").split(",").map((s) => s.trim()).filter(Boolean);

try {
  const orchestrator = await startOrchestrator({
    host: process.env.OZ0_HOST || "127.0.0.1",
    port: process.env.OZ0_PORT ? Number(process.env.OZ0_PORT) : 7700,
    ...(process.env.OZ0_HOME ? { home: process.env.OZ0_HOME } : {}),
    sandboxUrls: list(process.env.OZ0_SANDBOX_URLS),
    ...(process.env.OZ0_LLM_PROXY_URL ? { llmProxyUrl: process.env.OZ0_LLM_PROXY_URL } : {}),
    ...(process.env.OZ0_EVENTS_URL ? { eventsUrl: process.env.OZ0_EVENTS_URL } : {}),
    ...(process.env.DATABASE_URL ? { databaseUrl: process.env.DATABASE_URL } : {}),
    ...(process.env.OZ0_DATABASE_SCHEMA ? { databaseSchema: process.env.OZ0_DATABASE_SCHEMA } : {}),
    ...(process.env.OZ0_REPLICA_ID ? { replicaId: process.env.OZ0_REPLICA_ID } : {}),
    ...(process.env.OZ0_LEASE_TTL_MS ? { leaseTtlMs: Number(process.env.OZ0_LEASE_TTL_MS) } : {}),
    ...(process.env.OZ0_NODE_TOKEN ? { nodeToken: process.env.OZ0_NODE_TOKEN } : {}),
    ...(process.env.OZ0_NODE_PORT ? { nodePort: Number(process.env.OZ0_NODE_PORT) } : {}),
    auth: authSettingsFromEnv(process.env),
    ...(process.env.OZ0_NODE_STALE_AFTER_MS ? { nodeStaleAfterMs: Number(process.env.OZ0_NODE_STALE_AFTER_MS) } : {}),
    ...(process.env.OZ0_MAX_SESSION_STDERR_BYTES ? { maxSessionStderrBytes: Number(process.env.OZ0_MAX_SESSION_STDERR_BYTES) } : {}),
    ...(process.env.OZ0_CONSOLE_DIR ? { consoleDir: process.env.OZ0_CONSOLE_DIR } : {}),
    logger,
  });
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
