// The events service reads its environment in one place (configFromEnv): the
// variables the README lists become its configuration, and a malformed one
// stops the process at start with exit code 2, naming the variable and the
// form it expects.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { createRequire } from "node:module";
import path from "node:path";
import { test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";
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

/** A folder of the test's own, removed when it ends. */
function scratch(t: TestContext): string {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-events-config-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const testCa = fileURLToPath(new URL("./fixtures/kafka-test-ca.pem", import.meta.url));
const PASSWORD = "pw-8c1f0d2e-never-printed";

void test("SASL and TLS for Kafka: the password comes from its file, the CA from its own", (t) => {
  const dir = scratch(t);
  const passwordFile = path.join(dir, "password");
  // `echo secret > file` ends it with a line break, which is not part of the password.
  writeFileSync(passwordFile, `${PASSWORD}\n`);
  const base = { KAFKA_BROKERS: "kafka-0:9093" };
  const { kafkaSecurity } = configFromEnv({
    ...base,
    OZ0_KAFKA_SASL_MECHANISM: "scram-sha-512",
    OZ0_KAFKA_SASL_USERNAME: "oz0-events",
    OZ0_KAFKA_SASL_PASSWORD_FILE: passwordFile,
    OZ0_KAFKA_TLS_CA_FILE: testCa,
  });
  assert.deepEqual(kafkaSecurity, {
    sasl: { mechanism: "SCRAM-SHA-512", username: "oz0-events", password: PASSWORD },
    tls: { ca: readFileSync(testCa, "utf8") },
  });
  const sasl = (mechanism: string) =>
    configFromEnv({
      ...base,
      OZ0_KAFKA_SASL_MECHANISM: mechanism,
      OZ0_KAFKA_SASL_USERNAME: "u",
      OZ0_KAFKA_SASL_PASSWORD_FILE: passwordFile,
    }).kafkaSecurity;
  assert.deepEqual(sasl("SCRAM-SHA-256"), { sasl: { mechanism: "SCRAM-SHA-256", username: "u", password: PASSWORD } });
  assert.deepEqual(sasl("PLAIN"), { sasl: { mechanism: "PLAIN", username: "u", password: PASSWORD } });
  assert.deepEqual(configFromEnv({ ...base, OZ0_KAFKA_TLS: "true" }).kafkaSecurity, { tls: {} }, "Node's CAs");
  assert.equal(configFromEnv({ ...base, OZ0_KAFKA_TLS: "false" }).kafkaSecurity, undefined);
  assert.equal(configFromEnv(base).kafkaSecurity, undefined, "PLAINTEXT, as before");
});

void test("half a Kafka SASL or TLS setting is refused at start, and no refusal shows the password", (t) => {
  const dir = scratch(t);
  const passwordFile = path.join(dir, "password");
  writeFileSync(passwordFile, PASSWORD);
  const emptyFile = path.join(dir, "empty");
  writeFileSync(emptyFile, "\n");
  const notPem = path.join(dir, "ca.pem");
  writeFileSync(notPem, "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n");
  const brokers = { KAFKA_BROKERS: "kafka-0:9092" };
  const user = { OZ0_KAFKA_SASL_USERNAME: "oz0-events" };
  const file = { OZ0_KAFKA_SASL_PASSWORD_FILE: passwordFile };
  const scram = { OZ0_KAFKA_SASL_MECHANISM: "SCRAM-SHA-512" };
  const cases: [Record<string, string>, RegExp][] = [
    [
      { ...brokers, ...scram, ...file },
      /^OZ0_KAFKA_SASL_USERNAME must be the Kafka user's name when OZ0_KAFKA_SASL_MECHANISM is set; got ""$/,
    ],
    [
      { ...brokers, ...scram, ...user },
      /^OZ0_KAFKA_SASL_PASSWORD_FILE must be the path of a file holding the Kafka user's password when OZ0_KAFKA_SASL_MECHANISM is set/,
    ],
    [
      { ...brokers, ...user, ...file },
      /^OZ0_KAFKA_SASL_MECHANISM must be one of SCRAM-SHA-512, SCRAM-SHA-256, PLAIN when OZ0_KAFKA_SASL_USERNAME or OZ0_KAFKA_SASL_PASSWORD_FILE is set \(without it the service would connect without credentials\)/,
    ],
    [
      { ...brokers, OZ0_KAFKA_SASL_MECHANISM: "GSSAPI", ...user, ...file },
      /^OZ0_KAFKA_SASL_MECHANISM must be one of SCRAM-SHA-512, SCRAM-SHA-256, PLAIN; got "GSSAPI"$/,
    ],
    [
      { ...brokers, ...scram, ...user, OZ0_KAFKA_SASL_PASSWORD_FILE: path.join(dir, "missing") },
      /^OZ0_KAFKA_SASL_PASSWORD_FILE must be a readable file holding the Kafka user's password \(reading it failed: ENOENT\); got ".*missing"$/,
    ],
    [
      { ...brokers, ...scram, ...user, OZ0_KAFKA_SASL_PASSWORD_FILE: dir },
      /^OZ0_KAFKA_SASL_PASSWORD_FILE must be a readable file .*\(reading it failed: EISDIR\)/,
    ],
    [
      { ...brokers, ...scram, ...user, OZ0_KAFKA_SASL_PASSWORD_FILE: emptyFile },
      /^OZ0_KAFKA_SASL_PASSWORD_FILE must be a readable file holding the Kafka user's password; it is empty; got /,
    ],
    [
      { ...brokers, ...scram, ...user, ...file, OZ0_KAFKA_SASL_PASSWORD: PASSWORD },
      /^OZ0_KAFKA_SASL_PASSWORD must be unset: the service reads the Kafka password from a file only \(OZ0_KAFKA_SASL_PASSWORD_FILE, such as a mounted Secret\); got "\(set; its value is not shown\)"$/,
    ],
    [
      { ...scram, ...user, ...file },
      /^KAFKA_BROKERS must be the brokers to connect to when OZ0_KAFKA_SASL_MECHANISM is set/,
    ],
    [{ OZ0_KAFKA_TLS: "true" }, /^KAFKA_BROKERS must be the brokers to connect to when OZ0_KAFKA_TLS is set/],
    [{ ...brokers, OZ0_KAFKA_TLS: "yes" }, /^OZ0_KAFKA_TLS must be one of true, false; got "yes"$/],
    [
      { ...brokers, OZ0_KAFKA_TLS: "false", OZ0_KAFKA_TLS_CA_FILE: testCa },
      /^OZ0_KAFKA_TLS must be true or unset when OZ0_KAFKA_TLS_CA_FILE is set \(the CA is for TLS\); got "false"$/,
    ],
    [
      { ...brokers, OZ0_KAFKA_TLS_CA_FILE: path.join(dir, "missing.pem") },
      /^OZ0_KAFKA_TLS_CA_FILE must be a readable PEM file of the certificates that sign the brokers' \(the cluster's CA\) \(reading it failed: ENOENT\)/,
    ],
    [
      { ...brokers, OZ0_KAFKA_TLS_CA_FILE: passwordFile },
      /^OZ0_KAFKA_TLS_CA_FILE must be a readable PEM file .*\(no certificate in it\)/,
    ],
    [{ ...brokers, OZ0_KAFKA_TLS_CA_FILE: notPem }, /^OZ0_KAFKA_TLS_CA_FILE must be a readable PEM file /],
  ];
  for (const [env, message] of cases) {
    assert.throws(() => configFromEnv(env), { name: "EnvConfigError", message }, JSON.stringify(env));
    try {
      configFromEnv(env);
    } catch (error) {
      assert.doesNotMatch((error as Error).message, new RegExp(PASSWORD), "the password is never in a refusal");
    }
  }
});

void test("oz0-events with a Kafka password file it cannot read stops at start with exit code 2, naming the variable", () => {
  const main = createRequire(import.meta.url)
    .resolve("@oz0/events")
    .replace(/index\.js$/, "main.js");
  const result = spawnSync(process.execPath, [main], {
    env: {
      PATH: process.env.PATH,
      OZ0_PORT: "0",
      KAFKA_BROKERS: "127.0.0.1:9",
      OZ0_KAFKA_SASL_MECHANISM: "SCRAM-SHA-512",
      OZ0_KAFKA_SASL_USERNAME: "oz0-events",
      OZ0_KAFKA_SASL_PASSWORD_FILE: "/nonexistent/oz0-kafka-password",
    },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(result.status, 2, result.stderr);
  assert.equal(
    result.stderr,
    'oz0-events: OZ0_KAFKA_SASL_PASSWORD_FILE must be a readable file holding the Kafka user\'s password (reading it failed: ENOENT); got "/nonexistent/oz0-kafka-password"\n',
  );
});
