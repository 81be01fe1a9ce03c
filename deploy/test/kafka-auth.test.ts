// Kafka asks who is connecting and checks what they may do, in every rendered
// overlay that runs it: the checks are in support/kafka-auth-checks.ts, and
// the last suite breaks copies of prod and expects each check to say so.
import assert from "node:assert/strict";
import path from "node:path";
import { before, describe, it } from "node:test";
import {
  EVENTS_TOPIC_OPERATIONS,
  eventsKafkaUserFindings,
  kafkaAuthenticationFindings,
  topicWriterFindings,
} from "./support/kafka-auth-checks.js";
import { k8sDir, overlayDirs, render, type K8sObject } from "./support/render.js";
import { container, containerEnv, workload, type Any } from "./support/workloads.js";

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`Kafka authentication in ${overlay}`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("asks every client of every Kafka listener for a credential, and authorizes by ACLs nothing undoes", () => {
      assert.deepEqual(kafkaAuthenticationFindings(objects), []);
    });

    void it("logs events in as its KafkaUser, allowed its topic alone, with the password from that user's Secret as a file", () => {
      assert.deepEqual(eventsKafkaUserFindings(objects), []);
    });

    void it("lets no other KafkaUser write the lifecycle topic", () => {
      assert.deepEqual(topicWriterFindings(objects), []);
    });
  });
}

void describe("the Kafka authentication checks catch mistakes", () => {
  let prod: K8sObject[] = [];
  before(() => {
    prod = render(path.join(k8sDir, "overlays", "prod"));
  });
  /** A copy of prod, changed by `change`. */
  const broken = (change: (objects: Any[]) => void): K8sObject[] => {
    const copy = structuredClone(prod) as Any[];
    change(copy);
    return copy;
  };
  const kafka = (objects: Any[]): Any => objects.find((o) => o.kind === "Kafka");
  const eventsUser = (objects: Any[]): Any =>
    objects.find((o) => o.kind === "KafkaUser" && o.metadata.name === "oz0-events");
  const eventsPod = (objects: Any[]): Any =>
    objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "events").spec.template.spec;
  const eventsConfig = (objects: Any[]): Any =>
    objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("events")).data;

  void it("prod as rendered has no finding, and has a Kafka, a listener, the events user and its mount to check", () => {
    assert.deepEqual(kafkaAuthenticationFindings(prod), []);
    assert.deepEqual(eventsKafkaUserFindings(prod), []);
    assert.deepEqual(topicWriterFindings(prod), []);
    const listeners = kafka(prod).spec.kafka.listeners;
    assert.ok(listeners.length > 0);
    for (const listener of listeners) assert.equal(listener.authentication.type, "scram-sha-512");
    assert.equal(kafka(prod).spec.kafka.authorization.type, "simple");
    const acls = eventsUser(prod).spec.authorization.acls;
    assert.deepEqual(
      acls.map((a: Any) => ({ ...a.resource, operations: [...a.operations].sort() })),
      [{ type: "topic", name: "oz0.lifecycle.v1", patternType: "literal", operations: [...EVENTS_TOPIC_OPERATIONS] }],
    );
    const events = workload(prod, "events");
    const env = containerEnv(prod, container(events.pod, "events"));
    assert.equal(env.OZ0_KAFKA_SASL_USERNAME, "oz0-events");
    assert.equal(env.OZ0_KAFKA_SASL_PASSWORD_FILE, "/etc/oz0/kafka-user/password");
    const volume = (events.pod.volumes as Any[]).find((v) => v.secret?.secretName === "oz0-events");
    assert.deepEqual(volume.secret.items, [{ key: "password", path: "password" }]);
  });

  void it("a listener that takes no credential, no ACLs, or ACLs undone", () => {
    const open = broken((o) => delete kafka(o).spec.kafka.listeners[0].authentication);
    assert.match(kafkaAuthenticationFindings(open).join("\n"), /listener scram takes no credential/);
    const noAcls = broken((o) => delete kafka(o).spec.kafka.authorization);
    assert.match(
      kafkaAuthenticationFindings(noAcls).join("\n"),
      /oz0-kafka authorizes nothing, not by its KafkaUsers' ACLs/,
    );
    const superUser = broken((o) => (kafka(o).spec.kafka.authorization.superUsers = ["User:oz0-events"]));
    assert.match(kafkaAuthenticationFindings(superUser).join("\n"), /makes User:oz0-events a super user/);
    const everyone = broken((o) => (kafka(o).spec.kafka.config["allow.everyone.if.no.acl.found"] = true));
    assert.match(kafkaAuthenticationFindings(everyone).join("\n"), /allow\.everyone\.if\.no\.acl\.found/);
  });

  void it("an events user allowed more than its topic, or less than the relay needs", () => {
    const acl = (o: Any[]): Any => eventsUser(o).spec.authorization.acls[0];
    const prefixed = broken((o) => (acl(o).resource = { type: "topic", name: "oz0.", patternType: "prefix" }));
    assert.match(
      eventsKafkaUserFindings(prefixed).join("\n"),
      /KafkaUser oz0-events may Describe, Create, Write on topic prefixed oz0\.: events needs its topic oz0\.lifecycle\.v1 alone/,
    );
    const reads = broken((o) => acl(o).operations.push("Read"));
    assert.match(eventsKafkaUserFindings(reads).join("\n"), /may Read oz0\.lifecycle\.v1: the relay only describes/);
    const all = broken((o) => (acl(o).operations = ["All"]));
    const allFindings = eventsKafkaUserFindings(all).join("\n");
    assert.match(allFindings, /may All oz0\.lifecycle\.v1/);
    assert.match(allFindings, /may not Write oz0\.lifecycle\.v1: the relay cannot deliver without it/);
    const group = broken((o) =>
      eventsUser(o).spec.authorization.acls.push({
        resource: { type: "group", name: "*", patternType: "literal" },
        operations: ["Read"],
      }),
    );
    assert.match(eventsKafkaUserFindings(group).join("\n"), /may Read on group \*: events needs its topic/);
    const cluster = broken((o) =>
      eventsUser(o).spec.authorization.acls.push({ resource: { type: "cluster" }, operations: ["Alter"] }),
    );
    assert.match(eventsKafkaUserFindings(cluster).join("\n"), /may Alter on cluster \(no name\)/);
    const noCreate = broken((o) => (acl(o).operations = ["Describe", "Write"]));
    assert.match(eventsKafkaUserFindings(noCreate).join("\n"), /may not Create oz0\.lifecycle\.v1/);
  });

  void it("events logging in as someone else, without a user, or with its password elsewhere than its user's Secret file", () => {
    const other = broken((o) => (eventsConfig(o).OZ0_KAFKA_SASL_USERNAME = "admin"));
    assert.match(
      eventsKafkaUserFindings(other).join("\n"),
      /events logs in as admin .*, which is no KafkaUser of oz0-kafka/,
    );
    const anonymous = broken((o) => {
      delete eventsConfig(o).OZ0_KAFKA_SASL_MECHANISM;
      delete eventsConfig(o).OZ0_KAFKA_SASL_USERNAME;
    });
    const anonymousFindings = eventsKafkaUserFindings(anonymous).join("\n");
    assert.match(anonymousFindings, /events logs in by undefined .* where listener scram asks for SCRAM-SHA-512/);
    assert.match(anonymousFindings, /events logs in as undefined/);
    const otherSecret = broken(
      (o) => (eventsPod(o).volumes.find((v: Any) => v.name === "kafka-user").secret.secretName = "kafka-admin"),
    );
    assert.match(
      eventsKafkaUserFindings(otherSecret).join("\n"),
      /reads its Kafka password from the Secret kafka-admin, not oz0-events/,
    );
    const jaas = broken(
      (o) => (eventsPod(o).volumes.find((v: Any) => v.name === "kafka-user").secret.items[0].key = "sasl.jaas.config"),
    );
    assert.match(
      eventsKafkaUserFindings(jaas).join("\n"),
      /is the key sasl\.jaas\.config of oz0-events, not its password/,
    );
    const asVariable = broken((o) =>
      eventsPod(o).containers[0].env.push({
        name: "KAFKA_PASSWORD",
        valueFrom: { secretKeyRef: { name: "oz0-events", key: "password" } },
      }),
    );
    assert.match(
      eventsKafkaUserFindings(asVariable).join("\n"),
      /events takes oz0-events's password as the variable KAFKA_PASSWORD/,
    );
    const writable = broken(
      (o) => (eventsPod(o).containers[0].volumeMounts.find((m: Any) => m.name === "kafka-user").readOnly = false),
    );
    assert.match(eventsKafkaUserFindings(writable).join("\n"), /volume kafka-user is mounted writable/);
    const unmounted = broken((o) => (eventsConfig(o).OZ0_KAFKA_SASL_PASSWORD_FILE = "/var/lib/oz0-events/password"));
    assert.match(
      eventsKafkaUserFindings(unmounted).join("\n"),
      /\/var\/lib\/oz0-events\/password is on no Secret volume/,
    );
  });

  void it("another KafkaUser that may write the lifecycle topic", () => {
    const forger = broken((o) =>
      o.push({
        apiVersion: "kafka.strimzi.io/v1",
        kind: "KafkaUser",
        metadata: { name: "reporting", labels: { "strimzi.io/cluster": "oz0-kafka" } },
        spec: {
          authentication: { type: "scram-sha-512" },
          authorization: {
            type: "simple",
            acls: [{ resource: { type: "topic", name: "oz0.", patternType: "prefix" }, operations: ["Read", "Write"] }],
          },
        },
      }),
    );
    assert.match(
      topicWriterFindings(forger).join("\n"),
      /KafkaUser reporting may Write oz0\.lifecycle\.v1 \(Read, Write on topic prefixed oz0\.\): only events writes it/,
    );
  });
});
