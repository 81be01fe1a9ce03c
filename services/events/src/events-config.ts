// The events service's configuration as the environment gives it (README,
// "Configuration"), read and validated in one place: a malformed value is an
// EnvConfigError naming the variable and the form it expects, and main.ts
// stops on it before anything starts.
import {
  authSettingsFromEnv,
  EnvConfigError,
  envInteger,
  envList,
  envMaxMessageBytes,
  envNumber,
  envPort,
  envString,
} from "@oz0/serving";
import { homedir } from "node:os";
import path from "node:path";
import { DEFAULT_TOPIC, type EventsConfig } from "./start-events.js";

export const DEFAULT_PORT = 7703;

/** Everything `startEvents` takes from the environment (the logger is the caller's). */
export function configFromEnv(env: NodeJS.ProcessEnv): EventsConfig {
  const retentionHours = envNumber(env, "OZ0_EVENTS_RETENTION_HOURS", { unit: "hours (0 keeps every event)" });
  const maxMessageBytes = envMaxMessageBytes(env);
  const transcriptMaxEvents = envInteger(env, "OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS", { min: 1, unit: "events" });
  return {
    host: envString(env, "OZ0_HOST") ?? "127.0.0.1",
    port: envPort(env, "OZ0_PORT") ?? DEFAULT_PORT,
    dataDir: envString(env, "OZ0_EVENTS_DATA") ?? path.join(homedir(), ".oz0", "events"),
    kafkaBrokers: brokers(env, "KAFKA_BROKERS"),
    topic: topic(env, "OZ0_KAFKA_TOPIC") ?? DEFAULT_TOPIC,
    ...(retentionHours !== undefined ? { retentionMs: retentionHours * 3_600_000 } : {}),
    auth: authSettingsFromEnv(env),
    ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
    ...(transcriptMaxEvents !== undefined ? { transcriptMaxEvents } : {}),
  };
}

/** Comma-separated `host:port` bootstrap brokers, as kafkajs takes them; empty when unset. */
function brokers(env: NodeJS.ProcessEnv, name: string): string[] {
  // A URL (`kafka://…`, `http://…`) or a bare host would only fail later, at every connection attempt.
  return envList(env, name, {
    valid: (broker) => /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/.test(broker),
    expected: "comma-separated host:port brokers, such as kafka-0:9092,kafka-1:9092",
    nonEmpty: true,
  });
}

/** A legal Kafka topic name: letters, digits, `.`, `_` and `-`, at most 249 characters. */
function topic(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = envString(env, name);
  if (value === undefined) return undefined;
  if (!/^[A-Za-z0-9._-]{1,249}$/.test(value) || value === "." || value === "..")
    throw new EnvConfigError(name, "a Kafka topic name: letters, digits, '.', '_' and '-', up to 249", value);
  return value;
}
