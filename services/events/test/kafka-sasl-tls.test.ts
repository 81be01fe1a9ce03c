// Kafka that asks who is writing: a broker of the test's own with a SCRAM
// listener and ACLs on (startKafka's scramUsers and authorizer), and a TLS
// listener, and the events service as its own process, configured by its
// environment as in a cluster (a password file, a CA file). With the right
// password the relay delivers; with a wrong one it says so by code, its
// outbox keeps every event, and a restart with the right password delivers
// them, once each; a user the broker knows but whose ACLs do not cover the
// topic is told that instead. No password appears in anything the service
// logs, at debug. Over TLS the relay delivers when it trusts the broker's CA,
// and says it cannot verify the broker when it does not.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { createEventPublisher, rawEvent } from "@oz0/events-client";
import { testCredentials } from "@oz0/serving/testing";
import { startKafka, type RunningKafka } from "@oz0/test-infra";
import kafkajs from "kafkajs";
import { watchAll } from "./fixtures/events-client.js";
import { startEventsProcess, type EventsProcess } from "./fixtures/events-process.js";
import { readTopic } from "./fixtures/kafka-topic.js";

const { AclOperationTypes, AclPermissionTypes, AclResourceTypes, Kafka, logLevel, ResourcePatternTypes } = kafkajs;

const topic = "oz0.sasl.v1";
const USER = "oz0-events";
const PASSWORD = `right-${randomUUID()}`;
const WRONG_PASSWORD = `wrong-${randomUUID()}`;
/** A user the broker knows, by SCRAM-SHA-256, with no ACL at all. */
const STRANGER = "stranger";
const STRANGER_PASSWORD = `stranger-${randomUUID()}`;
const PASSWORDS = [PASSWORD, WRONG_PASSWORD, STRANGER_PASSWORD];

const dir = mkdtempSync(path.join(tmpdir(), "oz0-events-sasl-"));
let kafka: RunningKafka;
const running = new Set<EventsProcess>();

before(async () => {
  kafka = await startKafka({
    scramUsers: [
      { username: USER, password: PASSWORD },
      { mechanism: "SCRAM-SHA-256", username: STRANGER, password: STRANGER_PASSWORD },
    ],
    authorizer: true,
    tls: true,
  });
  // The ACLs deploy/k8s gives the KafkaUser oz0-events, and nothing more: its topic, literally, to describe, create
  // (the relay makes sure it exists) and write (an idempotent producer needs no cluster ACL besides). The TLS
  // listener authenticates nobody (User:ANONYMOUS, a super user of this broker): it tests the connection only.
  const admin = new Kafka({ clientId: "oz0-test-admin", brokers: kafka.brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    await admin.createAcls({
      acl: [AclOperationTypes.DESCRIBE, AclOperationTypes.CREATE, AclOperationTypes.WRITE].map((operation) => ({
        resourceType: AclResourceTypes.TOPIC,
        resourceName: topic,
        resourcePatternType: ResourcePatternTypes.LITERAL,
        principal: `User:${USER}`,
        host: "*",
        operation,
        permissionType: AclPermissionTypes.ALLOW,
      })),
    });
  } finally {
    await admin.disconnect();
  }
  for (const [name, password] of [
    ["password", PASSWORD],
    ["wrong-password", WRONG_PASSWORD],
    ["stranger-password", STRANGER_PASSWORD],
  ] as const)
    writeFileSync(path.join(dir, name), password, { mode: 0o600 });
});

after(async () => {
  for (const service of running) await service.stop();
  await kafka?.close();
  rmSync(dir, { recursive: true, force: true });
});

async function start(env: Record<string, string>): Promise<EventsProcess> {
  const service = await startEventsProcess({
    KAFKA_BROKERS: kafka.saslBrokers.join(","),
    OZ0_KAFKA_TOPIC: topic,
    OZ0_LOG_LEVEL: "debug",
    ...env,
  });
  running.add(service);
  return service;
}

async function stop(service: EventsProcess): Promise<string> {
  await service.stop();
  running.delete(service);
  return service.output();
}

async function publish(url: string, jobId: string, from: number, count: number): Promise<void> {
  const publisher = createEventPublisher({ token: testCredentials.services.orchestrator, url });
  for (let i = from; i < from + count; i++)
    publisher.publish(
      rawEvent("graph.step_started", {
        jobId,
        source: "orchestrator",
        attributes: { step_name: "work", iteration: i },
      }),
    );
  await publisher.flush();
  await publisher.close();
}

/** The first log line of the service that says `code`, once it has written one. */
async function logLine(service: EventsProcess, code: string): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const line = service
      .output()
      .split("\n")
      .find((l) => l.includes(`"code":"${code}"`));
    if (line) return JSON.parse(line) as Record<string, unknown>;
    if (Date.now() > deadline) throw new Error(`no ${code} line in:\n${service.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function assertNoPassword(log: string, where: string): void {
  for (const password of PASSWORDS) assert.ok(!log.includes(password), `a password is in ${where}`);
}

void test("a wrong password is refused and said so, the outbox keeps the events, and the right one delivers each once", async () => {
  const dataDir = path.join(dir, "data");
  const sasl = {
    OZ0_EVENTS_DATA: dataDir,
    OZ0_KAFKA_SASL_MECHANISM: "SCRAM-SHA-512",
    OZ0_KAFKA_SASL_USERNAME: USER,
  };

  const refused = await start({ ...sasl, OZ0_KAFKA_SASL_PASSWORD_FILE: path.join(dir, "wrong-password") });
  await publish(refused.url, "job-sasl", 0, 20);
  const warning = await logLine(refused, "KAFKA_AUTHENTICATION_FAILED");
  assert.match(String(warning.msg), /Kafka refused the credentials of the Kafka user oz0-events \(SCRAM-SHA-512\)/);
  assert.match(String(warning.msg), /events stay in the outbox/);
  assert.match(String(warning.reason), /authentication failed/i);
  assert.equal(warning.undelivered, 20);
  // Accepted and kept: Watch answers from the outbox while Kafka refuses the service.
  assert.equal((await watchAll(refused.url)).length, 20);
  const refusedLog = await stop(refused);
  assertNoPassword(refusedLog, "the log of the service with the wrong password");
  const ready = refusedLog.split("\n").find((l) => l.includes('"msg":"events ready"'));
  assert.ok(ready, refusedLog);
  assert.deepEqual((JSON.parse(ready) as { kafka: unknown }).kafka, {
    brokers: kafka.saslBrokers,
    topic,
    sasl: { mechanism: "SCRAM-SHA-512", username: USER },
    tls: "off",
  });

  const accepted = await start({ ...sasl, OZ0_KAFKA_SASL_PASSWORD_FILE: path.join(dir, "password") });
  await publish(accepted.url, "job-sasl", 20, 10);
  const messages = await readTopic({ brokers: kafka.brokers, topic, atLeast: 30 });
  assert.equal(messages.length, 30, "no event arrived twice");
  const iterations = messages
    .map((m) => (JSON.parse(m.value) as { attributes: { iteration: number } }).attributes.iteration)
    .sort((a, b) => a - b);
  assert.deepEqual(
    iterations,
    Array.from({ length: 30 }, (_, i) => i),
    "the events accepted while Kafka refused the password arrived, with the later ones",
  );
  const acceptedLog = await stop(accepted);
  assert.doesNotMatch(acceptedLog, /KAFKA_AUTHENTICATION_FAILED/);
  assertNoPassword(acceptedLog, "the log of the service with the right password");
});

void test("a user the broker knows but whose ACLs leave out the topic is told it is not authorised", async () => {
  const service = await start({
    OZ0_EVENTS_DATA: path.join(dir, "stranger-data"),
    OZ0_KAFKA_SASL_MECHANISM: "SCRAM-SHA-256",
    OZ0_KAFKA_SASL_USERNAME: STRANGER,
    OZ0_KAFKA_SASL_PASSWORD_FILE: path.join(dir, "stranger-password"),
  });
  await publish(service.url, "job-stranger", 0, 3);
  const warning = await logLine(service, "KAFKA_NOT_AUTHORIZED");
  assert.match(
    String(warning.msg),
    /Kafka's ACLs do not let the Kafka user stranger \(SCRAM-SHA-256\) use the topic oz0\.sasl\.v1; events stay in the outbox and are retried: allow it Write, Describe and Create on that topic/,
  );
  assert.equal(warning.undelivered, 3);
  const log = await stop(service);
  assert.doesNotMatch(log, /KAFKA_AUTHENTICATION_FAILED/, "SCRAM-SHA-256 authenticated it");
  assertNoPassword(log, "the log of the service without ACLs");
});

void test("over TLS the relay delivers when it trusts the broker's CA, and says it cannot verify the broker when not", async () => {
  const tlsTopic = "oz0.tls.v1";
  const trusted = await start({
    KAFKA_BROKERS: kafka.tlsBrokers.join(","),
    OZ0_KAFKA_TOPIC: tlsTopic,
    OZ0_EVENTS_DATA: path.join(dir, "tls-data"),
    OZ0_KAFKA_TLS_CA_FILE: kafka.caFile!,
  });
  await publish(trusted.url, "job-tls", 0, 5);
  assert.equal((await readTopic({ brokers: kafka.brokers, topic: tlsTopic, atLeast: 5 })).length, 5);
  const trustedLog = await stop(trusted);
  assert.match(trustedLog, /"tls":"CA file"/, "the start-up line says TLS is on");

  // Another CA (the config test's, whose key nobody kept) did not sign the broker's certificate.
  const untrusted = await start({
    KAFKA_BROKERS: kafka.tlsBrokers.join(","),
    OZ0_KAFKA_TOPIC: tlsTopic,
    OZ0_EVENTS_DATA: path.join(dir, "untrusted-data"),
    OZ0_KAFKA_TLS_CA_FILE: fileURLToPath(new URL("./fixtures/kafka-test-ca.pem", import.meta.url)),
  });
  await publish(untrusted.url, "job-untrusted", 0, 1);
  const warning = await logLine(untrusted, "KAFKA_TLS_FAILED");
  assert.match(String(warning.msg), /set OZ0_KAFKA_TLS_CA_FILE to the CA that signed the brokers' certificates/);
  assert.match(String(warning.reason), /certificate/);
  await stop(untrusted);
});
