// What the relay tells the operator when Kafka refuses it comes from
// kafkaFailure, which has to find the cause inside the errors kafkajs wraps
// it in; and what it may log of the settings leaves the password out.
import assert from "node:assert/strict";
import { test } from "node:test";
import kafkajs from "kafkajs";
import { describeKafkaSecurity, kafkaFailure, kafkajsSecurity } from "../src/kafka-security.js";

const { KafkaJSAggregateError, KafkaJSConnectionError, KafkaJSNumberOfRetriesExceeded, KafkaJSProtocolError } = kafkajs;

/** A protocol error as kafkajs makes it from a broker's error code (its types declare a message instead). */
function protocolError(type: string, code: number): Error {
  return new KafkaJSProtocolError({ type, code, retriable: false, message: type } as unknown as Error);
}

/** kafkajs's SASL error, which takes its message as its other errors do (its types declare no argument). */
const SaslError = kafkajs.KafkaJSSASLAuthenticationError as unknown as new (message: string) => Error;

void test("kafkaFailure finds the cause inside kafkajs's wrappers", () => {
  const sasl = new SaslError("SASL SCRAM SHA512 authentication failed: invalid credentials");
  assert.equal(kafkaFailure(sasl), "authentication");
  assert.equal(
    kafkaFailure(new KafkaJSNumberOfRetriesExceeded(sasl, { retryCount: 5, retryTime: 100 })),
    "authentication",
  );
  assert.equal(kafkaFailure(protocolError("CLUSTER_AUTHORIZATION_FAILED", 31)), "authorization");
  const creation = new KafkaJSAggregateError("Topic creation errors", [
    protocolError("TOPIC_AUTHORIZATION_FAILED", 29),
  ]);
  assert.equal(kafkaFailure(creation), "authorization");
  const selfSigned = new KafkaJSConnectionError("Connection error: self-signed certificate in certificate chain", {
    broker: "kafka-0:9093",
    code: "SELF_SIGNED_CERT_IN_CHAIN",
  });
  assert.equal(kafkaFailure(new KafkaJSNumberOfRetriesExceeded(selfSigned, { retryCount: 5, retryTime: 100 })), "tls");
  const refused = new KafkaJSConnectionError("Connection error: connect ECONNREFUSED 127.0.0.1:9092", {
    broker: "127.0.0.1:9092",
    code: "ECONNREFUSED",
  });
  assert.equal(kafkaFailure(refused), "unavailable");
  assert.equal(kafkaFailure(new Error("the Kafka producer thread stopped: exit code 1")), "unavailable");
  assert.equal(kafkaFailure("not an error"), "unavailable");
});

void test("the settings as logged name the mechanism and the user, never the password", () => {
  const security = {
    sasl: { mechanism: "SCRAM-SHA-512" as const, username: "oz0-events", password: "pw-do-not-log" },
    tls: { ca: "-----BEGIN CERTIFICATE-----\n…" },
  };
  const described = describeKafkaSecurity(security);
  assert.deepEqual(described, { sasl: { mechanism: "SCRAM-SHA-512", username: "oz0-events" }, tls: "CA file" });
  assert.ok(!JSON.stringify(described).includes("pw-do-not-log"));
  assert.deepEqual(describeKafkaSecurity(undefined), { sasl: "off", tls: "off" });
  assert.deepEqual(describeKafkaSecurity({ tls: {} }), { sasl: "off", tls: "system CAs" });
  assert.deepEqual(kafkajsSecurity(security), {
    ssl: { ca: [security.tls.ca] },
    sasl: { mechanism: "scram-sha-512", username: "oz0-events", password: "pw-do-not-log" },
  });
  assert.deepEqual(kafkajsSecurity({ tls: {} }), { ssl: true });
  assert.deepEqual(kafkajsSecurity({ sasl: { mechanism: "PLAIN", username: "u", password: "p" } }), {
    sasl: { mechanism: "plain", username: "u", password: "p" },
  });
  assert.deepEqual(kafkajsSecurity(undefined), {});
});
