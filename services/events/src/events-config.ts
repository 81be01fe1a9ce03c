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
  envOneOf,
  envPort,
  envString,
} from "@oz0/serving";
import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import path from "node:path";
import { SASL_MECHANISMS, type KafkaSecurity, type SaslMechanism } from "./kafka-security.js";
import { DEFAULT_TOPIC, type EventsConfig } from "./start-events.js";

export const DEFAULT_PORT = 7703;

/** Everything `startEvents` takes from the environment (the logger is the caller's). */
export function configFromEnv(env: NodeJS.ProcessEnv): EventsConfig {
  const retentionHours = envNumber(env, "OZ0_EVENTS_RETENTION_HOURS", { unit: "hours (0 keeps every event)" });
  const maxMessageBytes = envMaxMessageBytes(env);
  const transcriptMaxEvents = envInteger(env, "OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS", { min: 1, unit: "events" });
  const kafkaBrokers = brokers(env, "KAFKA_BROKERS");
  const security = kafkaSecurity(env, kafkaBrokers);
  return {
    host: envString(env, "OZ0_HOST") ?? "127.0.0.1",
    port: envPort(env, "OZ0_PORT") ?? DEFAULT_PORT,
    dataDir: envString(env, "OZ0_EVENTS_DATA") ?? path.join(homedir(), ".oz0", "events"),
    kafkaBrokers,
    topic: topic(env, "OZ0_KAFKA_TOPIC") ?? DEFAULT_TOPIC,
    ...(security ? { kafkaSecurity: security } : {}),
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

const MECHANISM = "OZ0_KAFKA_SASL_MECHANISM";
const USERNAME = "OZ0_KAFKA_SASL_USERNAME";
const PASSWORD_FILE = "OZ0_KAFKA_SASL_PASSWORD_FILE";
const TLS = "OZ0_KAFKA_TLS";
const CA_FILE = "OZ0_KAFKA_TLS_CA_FILE";

/**
 * SASL and TLS for the relay's Kafka client; undefined when none of their
 * variables is set (PLAINTEXT). Half a setting is refused rather than
 * dropped: a username without a mechanism would connect without credentials.
 * The password is read here, from its file, so an unreadable one stops the
 * service at start; no error or log line carries it.
 */
function kafkaSecurity(env: NodeJS.ProcessEnv, brokers: string[]): KafkaSecurity | undefined {
  // A Secret given as a variable is in every child's environment and in the pod's spec; a mounted file is neither.
  if (envString(env, "OZ0_KAFKA_SASL_PASSWORD") !== undefined)
    throw new EnvConfigError(
      "OZ0_KAFKA_SASL_PASSWORD",
      `unset: the service reads the Kafka password from a file only (${PASSWORD_FILE}, such as a mounted Secret)`,
      "(set; its value is not shown)",
    );
  const mechanism = saslMechanism(env);
  const username = envString(env, USERNAME);
  const passwordFile = envString(env, PASSWORD_FILE);
  const tls = envOneOf(env, TLS, ["true", "false"] as const);
  const caFile = envString(env, CA_FILE);
  const security: KafkaSecurity = {};
  if (mechanism === undefined) {
    if (username !== undefined || passwordFile !== undefined)
      throw new EnvConfigError(
        MECHANISM,
        `one of ${SASL_MECHANISMS.join(", ")} when ${USERNAME} or ${PASSWORD_FILE} is set (without it the service would connect without credentials)`,
        "",
      );
  } else {
    if (username === undefined)
      throw new EnvConfigError(USERNAME, `the Kafka user's name when ${MECHANISM} is set`, "");
    if (passwordFile === undefined)
      throw new EnvConfigError(
        PASSWORD_FILE,
        `the path of a file holding the Kafka user's password when ${MECHANISM} is set`,
        "",
      );
    security.sasl = { mechanism, username, password: readPassword(passwordFile) };
  }
  if (caFile !== undefined) {
    if (tls === "false") throw new EnvConfigError(TLS, `true or unset when ${CA_FILE} is set (the CA is for TLS)`, tls);
    security.tls = { ca: readCertificates(caFile) };
  } else if (tls === "true") security.tls = {};
  if (!security.sasl && !security.tls) return undefined;
  if (brokers.length === 0)
    throw new EnvConfigError(
      "KAFKA_BROKERS",
      `the brokers to connect to when ${security.sasl ? MECHANISM : TLS} is set (without brokers the service has no Kafka)`,
      "",
    );
  return security;
}

function saslMechanism(env: NodeJS.ProcessEnv): SaslMechanism | undefined {
  const value = envString(env, MECHANISM);
  if (value === undefined) return undefined;
  const mechanism = SASL_MECHANISMS.find((m) => m === value.toUpperCase());
  if (!mechanism) throw new EnvConfigError(MECHANISM, `one of ${SASL_MECHANISMS.join(", ")}`, value);
  return mechanism;
}

/** The file's text less its final line break (`echo secret > file` adds one; Kubernetes' Secrets add none). */
function readPassword(file: string): string {
  const expected = "a readable file holding the Kafka user's password";
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new EnvConfigError(PASSWORD_FILE, `${expected} (reading it failed: ${readFailure(error)})`, file);
  }
  const password = text.replace(/\r?\n$/, "");
  if (password === "") throw new EnvConfigError(PASSWORD_FILE, `${expected}; it is empty`, file);
  return password;
}

/** PEM certificates, checked to be at least one that Node can read. */
function readCertificates(file: string): string {
  const expected = "a readable PEM file of the certificates that sign the brokers' (the cluster's CA)";
  let pem: string;
  try {
    pem = readFileSync(file, "utf8");
  } catch (error) {
    throw new EnvConfigError(CA_FILE, `${expected} (reading it failed: ${readFailure(error)})`, file);
  }
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g) ?? [];
  try {
    if (blocks.length === 0) throw new Error("no certificate in it");
    for (const block of blocks) new X509Certificate(block);
  } catch (error) {
    throw new EnvConfigError(CA_FILE, `${expected} (${(error as Error).message})`, file);
  }
  return pem;
}

function readFailure(error: unknown): string {
  const { code, message } = error as NodeJS.ErrnoException;
  return code ?? message;
}
