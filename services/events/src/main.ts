#!/usr/bin/env node
// oz0-events: the events service as a process, configured from the environment.
import { authSettingsFromEnv, createLogger, onShutdownSignal, startTelemetry } from "@oz0/serving";
import { homedir } from "node:os";
import path from "node:path";
import { DEFAULT_TOPIC, startEvents } from "./start-events.js";

const logger = createLogger({ name: "events" });
// Before anything else starts, so every span of this process is exported (a no-op without OTEL_*).
const telemetry = startTelemetry({ serviceName: "oz0-events" });
const list = (value: string | undefined): string[] =>
  (value ?? "")
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);

function port(value: string | undefined, fallback: number): number {
  if (!value) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) {
    process.stderr.write(`oz0-events: OZ0_PORT must be a port number (0-65535), got ${JSON.stringify(value)}\n`);
    process.exit(2);
  }
  return n;
}

function retentionMs(value: string | undefined): number | undefined {
  if (!value) return undefined;
  const hours = Number(value);
  if (!Number.isFinite(hours) || hours < 0) {
    process.stderr.write(
      `oz0-events: OZ0_EVENTS_RETENTION_HOURS must be a number of hours (0 keeps every event), got ${JSON.stringify(value)}\n`,
    );
    process.exit(2);
  }
  return hours * 3_600_000;
}

try {
  const retention = retentionMs(process.env.OZ0_EVENTS_RETENTION_HOURS);
  const events = await startEvents({
    host: process.env.OZ0_HOST || "127.0.0.1",
    port: port(process.env.OZ0_PORT, 7703),
    dataDir: process.env.OZ0_EVENTS_DATA || path.join(homedir(), ".oz0", "events"),
    kafkaBrokers: list(process.env.KAFKA_BROKERS),
    topic: process.env.OZ0_KAFKA_TOPIC || DEFAULT_TOPIC,
    ...(retention !== undefined ? { retentionMs: retention } : {}),
    auth: authSettingsFromEnv(process.env),
    logger,
  });
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
