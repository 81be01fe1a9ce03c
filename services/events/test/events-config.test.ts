// The events service reads its environment in one place (configFromEnv): the
// variables the README lists become its configuration, and a malformed one
// stops the process at start with exit code 2, naming the variable and the
// form it expects.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { homedir } from "node:os";
import { createRequire } from "node:module";
import path from "node:path";
import { test } from "node:test";
import { configFromEnv } from "../src/events-config.js";

void test("the environment's variables become the events service's configuration", () => {
  const { auth, ...rest } = configFromEnv({
    OZ0_PORT: "0",
    OZ0_HOST: "0.0.0.0",
    OZ0_EVENTS_DATA: "/var/lib/oz0-events",
    KAFKA_BROKERS: "kafka-0:9092, kafka-1.kafka:9093,[::1]:9094",
    OZ0_KAFKA_TOPIC: "oz0.lifecycle.v1-test_a",
    OZ0_EVENTS_RETENTION_HOURS: "0.5",
    OZ0_MAX_MESSAGE_BYTES: "33554432",
    OZ0_EVENTS_TRANSCRIPT_MAX_EVENTS: "2000",
  });
  assert.ok(auth);
  assert.deepEqual(rest, {
    host: "0.0.0.0",
    port: 0,
    dataDir: "/var/lib/oz0-events",
    kafkaBrokers: ["kafka-0:9092", "kafka-1.kafka:9093", "[::1]:9094"],
    topic: "oz0.lifecycle.v1-test_a",
    retentionMs: 1_800_000,
    maxMessageBytes: 32 * 1024 * 1024,
    transcriptMaxEvents: 2000,
  });
});

void test("unset variables take the README's defaults", () => {
  const { auth, ...rest } = configFromEnv({});
  assert.ok(auth);
  assert.deepEqual(rest, {
    host: "127.0.0.1",
    port: 7703,
    dataDir: path.join(homedir(), ".oz0", "events"),
    kafkaBrokers: [],
    topic: "oz0.lifecycle.v1",
  });
  assert.equal(configFromEnv({ OZ0_EVENTS_RETENTION_HOURS: "0" }).retentionMs, 0, "0 keeps every event");
});

void test("a malformed variable is refused, naming it and the form it expects", () => {
  const cases: [Record<string, string>, RegExp][] = [
    [{ OZ0_PORT: "x" }, /^OZ0_PORT must be a port number from 0 \(any free port\) to 65535; got "x"$/],
    [{ OZ0_PORT: "70000" }, /^OZ0_PORT must be a port number/],
    [
      { OZ0_EVENTS_RETENTION_HOURS: "7d" },
      /^OZ0_EVENTS_RETENTION_HOURS must be a number of hours \(0 keeps every event\), at least 0; got "7d"$/,
    ],
    [{ OZ0_EVENTS_RETENTION_HOURS: "-1" }, /^OZ0_EVENTS_RETENTION_HOURS must be a number of hours/],
    [
      { KAFKA_BROKERS: "kafka://kafka-0:9092" },
      /^KAFKA_BROKERS must be comma-separated host:port brokers, such as kafka-0:9092,kafka-1:9092; got "kafka:\/\/kafka-0:9092"$/,
    ],
    [{ KAFKA_BROKERS: "kafka-0:9092,kafka-1" }, /^KAFKA_BROKERS must be comma-separated host:port brokers/],
    [{ KAFKA_BROKERS: "," }, /^KAFKA_BROKERS must be comma-separated host:port brokers/],
    [{ OZ0_MAX_MESSAGE_BYTES: "16M" }, /^OZ0_MAX_MESSAGE_BYTES must be a whole number of bytes, from 1 to 4294967295/],
    [
      { OZ0_KAFKA_TOPIC: "oz0 lifecycle" },
      /^OZ0_KAFKA_TOPIC must be a Kafka topic name: letters, digits, '\.', '_' and '-', up to 249; got "oz0 lifecycle"$/,
    ],
  ];
  for (const [env, message] of cases)
    assert.throws(() => configFromEnv(env), { name: "EnvConfigError", message }, JSON.stringify(env));
});

void test("oz0-events with a malformed variable stops at start with exit code 2 and says what to set", () => {
  const main = createRequire(import.meta.url)
    .resolve("@oz0/events")
    .replace(/index\.js$/, "main.js");
  const result = spawnSync(process.execPath, [main], {
    env: { PATH: process.env.PATH, OZ0_PORT: "0", OZ0_EVENTS_RETENTION_HOURS: "a week" },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.equal(
    result.stderr,
    'oz0-events: OZ0_EVENTS_RETENTION_HOURS must be a number of hours (0 keeps every event), at least 0; got "a week"\n',
  );
});
