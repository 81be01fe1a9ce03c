// needs: kafka
// A kafkajs connection that has nothing waiting to be sent arms no check of
// its request queue. kafkajs re-armed one every millisecond after a
// connection's first response, forever (tulios/kafkajs#1704): about 50 ms of
// CPU a second in an idle producer. Requests that wait for an in-flight slot
// are still sent, and a connection left idle still sends when asked.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { KAFKAJS_REQUEST_QUEUE, useFasterKafkajsPaths } from "../src/kafkajs-hot-paths.js";

const require = createRequire(import.meta.url);

void test("a producer left idle checks its request queues no more, and sends what waited and what comes after", async (t) => {
  assert.equal(useFasterKafkajsPaths().idleQueues, true);
  const { prototype } = require(KAFKAJS_REQUEST_QUEUE) as { prototype: { checkPendingRequests(): void } };
  const check = prototype.checkPendingRequests;
  let checks = 0;
  prototype.checkPendingRequests = function (this: unknown) {
    checks += 1;
    check.call(this);
  };
  t.after(() => {
    prototype.checkPendingRequests = check;
  });
  const { Kafka, logLevel } = await import("kafkajs");
  const kafka = new Kafka({
    clientId: "oz0-idle-queues-test",
    brokers: process.env.KAFKA_BROKERS!.split(","),
    logLevel: logLevel.NOTHING,
  });
  const producer = kafka.producer({ allowAutoTopicCreation: true, maxInFlightRequests: 1 });
  await producer.connect();
  t.after(() => producer.disconnect());
  const topic = `oz0-idle-queues-${Date.now()}`;
  // One in-flight request at a time: the others wait in the queue, and its checks send them.
  await Promise.all([1, 2, 3, 4, 5].map((i) => producer.send({ topic, messages: [{ value: `waited ${i}` }] })));
  assert.ok(checks > 0, "the queued sends went through kafkajs's checks");
  checks = 0;
  await sleep(1_000);
  // kafkajs's own would have checked about a thousand times by now.
  assert.ok(checks <= 2, `${checks} checks of idle queues in a second`);
  const [sent] = await producer.send({ topic, messages: [{ value: "after the idle second" }] });
  assert.equal(sent?.errorCode, 0);
});
