#!/usr/bin/env node
// The llm-proxy process: environment in, startLlmProxy, SIGTERM out.
import { authSettingsFromEnv, createLogger, onShutdownSignal, startTelemetry } from "@oz0/serving";
import { loadKek, loadProvidersFile, startLlmProxy } from "./index.js";

const logger = createLogger({ name: "llm-proxy" });

function positiveMs(value: string, name: string): number {
  const ms = Number(value);
  if (!Number.isInteger(ms) || ms <= 0)
    throw new Error(`${name} must be a positive number of milliseconds, got ${JSON.stringify(value)}`);
  return ms;
}
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-llm-proxy" });
try {
  const env = process.env;
  const proxy = await startLlmProxy({
    port: Number(env.OZ0_PORT ?? 7702),
    host: env.OZ0_HOST ?? "127.0.0.1",
    dataDir: env.OZ0_LLM_PROXY_DATA ?? ".oz0/llm-proxy",
    // PostgreSQL instead of the SQLite file: what several replicas share.
    ...(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL } : {}),
    ...(env.OZ0_DATABASE_SCHEMA ? { databaseSchema: env.OZ0_DATABASE_SCHEMA } : {}),
    ...(env.OZ0_SECRETS_DIR ? { secretsDir: env.OZ0_SECRETS_DIR } : {}),
    ...(env.OZ0_PROVIDERS_FILE ? { providers: loadProvidersFile(env.OZ0_PROVIDERS_FILE) } : {}),
    ...(env.OZ0_EVENTS_URL ? { eventsUrl: env.OZ0_EVENTS_URL } : {}),
    auth: authSettingsFromEnv(env),
    ...(env.OZ0_UPSTREAM_TIMEOUT_MS
      ? { retry: { attemptTimeoutMs: positiveMs(env.OZ0_UPSTREAM_TIMEOUT_MS, "OZ0_UPSTREAM_TIMEOUT_MS") } }
      : {}),
    ...((): { kek?: Buffer } => {
      const kek = loadKek(env);
      return kek ? { kek } : {};
    })(),
    logger,
  });
  onShutdownSignal(logger, async () => {
    await proxy.close();
    // Flush the spans and metrics of the last work before the process exits.
    await telemetry.shutdown();
  });
} catch (error) {
  logger.fatal({ message: (error as Error).message }, "llm-proxy could not start");
  process.exitCode = 1;
}
