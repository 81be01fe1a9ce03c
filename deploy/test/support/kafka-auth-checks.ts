// Who Kafka lets in and what it lets them do, over rendered objects. Kafka
// carries every job's lifecycle events: a client the brokers cannot tell from
// the events service could read them all or write forged ones. Each check
// returns its findings (empty when the rule holds), so kafka-auth.test.ts can
// also show that each one fails on the mistake it is there for.
import path from "node:path";
import type { K8sObject } from "./render.js";
import { container, containerEnv, workloads, type Any } from "./workloads.js";

/**
 * What the events relay does with its topic, and so all its Kafka user may
 * do: describe it and create it (it makes sure the topic exists, with its
 * partitions, before its first batch) and write it. An idempotent producer
 * needs no cluster ACL besides (services/events/test/kafka-sasl-tls.test.ts runs
 * the relay on a broker with exactly these ACLs).
 */
export const EVENTS_TOPIC_OPERATIONS = ["Create", "Describe", "Write"] as const;

/** Operations on a topic that put events on it, or let a user grant itself more. */
const WRITES = new Set(["Write", "All", "Alter", "AlterConfigs"]);

const kafkas = (objects: K8sObject[]): Any[] => objects.filter((o) => o.kind === "Kafka");
const kafkaUsers = (objects: K8sObject[]): Any[] => objects.filter((o) => o.kind === "KafkaUser");

/**
 * Every listener of every Kafka asks for a credential (`authentication`), the
 * brokers check ACLs (`authorization: simple`), and nothing undoes them: no
 * `allow.everyone.if.no.acl.found`, no super user beyond Strimzi's own
 * (which Strimzi adds itself).
 */
export function kafkaAuthenticationFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const kafka of kafkas(objects)) {
    const where = `Kafka ${kafka.metadata.name as string}`;
    for (const listener of kafka.spec?.kafka?.listeners ?? []) {
      if (!listener.authentication?.type)
        findings.push(
          `${where} listener ${listener.name as string} takes no credential: whoever reaches it reads and writes every topic`,
        );
    }
    const authorization = kafka.spec?.kafka?.authorization;
    if (authorization?.type !== "simple")
      findings.push(
        `${where} authorizes ${authorization?.type ? `by ${String(authorization.type)}` : "nothing"}, not by its KafkaUsers' ACLs (spec.kafka.authorization.type: simple): any authenticated user may do anything`,
      );
    for (const user of authorization?.superUsers ?? [])
      findings.push(`${where} makes ${String(user)} a super user, which no ACL limits`);
    const config = kafka.spec?.kafka?.config ?? {};
    if (String(config["allow.everyone.if.no.acl.found"]) === "true")
      findings.push(`${where} sets allow.everyone.if.no.acl.found: a topic without ACLs is open to every user`);
  }
  return findings;
}

/** `a/b` from a KafkaUser's rule, for findings. */
function describeRule(rule: Any): string {
  const resource = rule.resource ?? {};
  return `${(rule.operations ?? []).join(", ")} on ${String(resource.type)} ${resource.patternType === "prefix" ? "prefixed " : ""}${String(resource.name ?? "(no name)")}`;
}

/**
 * Where events sends its events, the events service logs in as a KafkaUser of
 * that Kafka by the mechanism its listener asks for; the user may describe,
 * create and write the events topic, by its literal name, and nothing else;
 * and the pod reads the user's password as a file from the Secret Strimzi's
 * User Operator makes for it (the user's name, key `password`), mounted
 * read-only, never as an environment variable.
 */
export function eventsKafkaUserFindings(objects: K8sObject[]): string[] {
  const events = workloads(objects).find((w) => w.name === "events");
  if (!events) return ["no events workload"];
  const c = container(events.pod, "events");
  const env = containerEnv(objects, c);
  if (!env.KAFKA_BROKERS) return []; // the local log only: no Kafka to log in to
  const findings: string[] = [];
  const broker = env.KAFKA_BROKERS.split(",")[0]!.trim();
  const kafka = kafkas(objects).find((k) => broker.startsWith(`${k.metadata.name as string}-kafka-bootstrap:`));
  if (!kafka) return [`events' KAFKA_BROKERS ${env.KAFKA_BROKERS} names no Kafka rendered here`];
  const listener = (kafka.spec.kafka.listeners ?? []).find((l: Any) => broker.endsWith(`:${String(l.port)}`));
  if (!listener) return [`events' KAFKA_BROKERS ${broker} is no listener's port of Kafka ${kafka.metadata.name}`];

  const mechanism = env.OZ0_KAFKA_SASL_MECHANISM;
  const username = env.OZ0_KAFKA_SASL_USERNAME;
  if (listener.authentication?.type === "scram-sha-512" && mechanism?.toUpperCase() !== "SCRAM-SHA-512")
    findings.push(
      `events logs in by ${String(mechanism)} (OZ0_KAFKA_SASL_MECHANISM) where listener ${listener.name} asks for SCRAM-SHA-512`,
    );
  const user = kafkaUsers(objects).find(
    (u) => u.metadata.name === username && u.metadata.labels?.["strimzi.io/cluster"] === kafka.metadata.name,
  );
  if (!user) {
    findings.push(
      `events logs in as ${String(username)} (OZ0_KAFKA_SASL_USERNAME), which is no KafkaUser of ${kafka.metadata.name}`,
    );
    return findings;
  }
  const who = `KafkaUser ${user.metadata.name as string}`;
  if (user.spec?.authentication?.type !== listener.authentication?.type)
    findings.push(
      `${who} authenticates by ${String(user.spec?.authentication?.type)}, listener ${listener.name} by ${String(listener.authentication?.type)}`,
    );

  // Its ACLs: the events topic, literally, and only what the relay does with it.
  const topic = env.OZ0_KAFKA_TOPIC;
  if (user.spec?.authorization?.type !== "simple") findings.push(`${who} has no ACLs (spec.authorization.type simple)`);
  const granted = new Set<string>();
  for (const rule of user.spec?.authorization?.acls ?? []) {
    if (rule.type === "deny") continue;
    const resource = rule.resource ?? {};
    const onTopic =
      resource.type === "topic" && (resource.patternType ?? "literal") === "literal" && resource.name === topic;
    if (!onTopic) {
      findings.push(`${who} may ${describeRule(rule)}: events needs its topic ${String(topic)} alone`);
      continue;
    }
    if (rule.host !== undefined && rule.host !== "*")
      findings.push(`${who}'s rule for ${topic} holds from ${String(rule.host)} only; pods have no fixed address`);
    for (const operation of rule.operations ?? []) {
      if ((EVENTS_TOPIC_OPERATIONS as readonly string[]).includes(operation)) granted.add(operation);
      else findings.push(`${who} may ${String(operation)} ${topic}: the relay only describes, creates and writes it`);
    }
  }
  for (const operation of EVENTS_TOPIC_OPERATIONS)
    if (!granted.has(operation))
      findings.push(`${who} may not ${operation} ${String(topic)}: the relay cannot deliver without it`);

  // The password: the user's Secret, as a file.
  const secretName = `${String(kafka.spec?.entityOperator?.userOperator?.secretPrefix ?? "")}${user.metadata.name as string}`;
  for (const e of c.env ?? [])
    if (e.valueFrom?.secretKeyRef?.name === secretName)
      findings.push(`events takes ${secretName}'s ${String(e.valueFrom.secretKeyRef.key)} as the variable ${e.name}`);
  const file = env.OZ0_KAFKA_SASL_PASSWORD_FILE;
  if (!file?.startsWith("/")) {
    findings.push(`events' OZ0_KAFKA_SASL_PASSWORD_FILE is ${String(file)}, not a path`);
    return findings;
  }
  const mount = (c.volumeMounts ?? [])
    .filter((m: Any) => file.startsWith(`${String(m.mountPath).replace(/\/$/, "")}/`))
    .sort((a: Any, b: Any) => b.mountPath.length - a.mountPath.length)[0];
  const volume = mount && (events.pod.volumes ?? []).find((v: Any) => v.name === mount.name);
  if (!volume?.secret) {
    findings.push(`events' OZ0_KAFKA_SASL_PASSWORD_FILE ${file} is on no Secret volume`);
    return findings;
  }
  if (volume.secret.secretName !== secretName)
    findings.push(
      `events reads its Kafka password from the Secret ${String(volume.secret.secretName)}, not ${secretName}, which Strimzi's User Operator writes for ${who}`,
    );
  const relative = path.posix.relative(mount.mountPath, file);
  const items: Any[] | undefined = volume.secret.items;
  const key = items ? items.find((i) => i.path === relative)?.key : relative;
  if (key !== "password")
    findings.push(
      `events' OZ0_KAFKA_SASL_PASSWORD_FILE ${file} is ${key === undefined ? "no key" : `the key ${String(key)}`} of ${String(volume.secret.secretName)}, not its password`,
    );
  if (mount.readOnly !== true) findings.push(`the Kafka password's volume ${mount.name} is mounted writable`);
  return findings;
}

/** No KafkaUser but events' may put events on the lifecycle topic: one that could would forge them. */
export function topicWriterFindings(objects: K8sObject[]): string[] {
  const events = workloads(objects).find((w) => w.name === "events");
  if (!events) return [];
  const env = containerEnv(objects, container(events.pod, "events"));
  const topic = env.OZ0_KAFKA_TOPIC;
  const findings: string[] = [];
  for (const user of kafkaUsers(objects)) {
    if (user.metadata.name === env.OZ0_KAFKA_SASL_USERNAME) continue;
    for (const rule of user.spec?.authorization?.acls ?? []) {
      if (rule.type === "deny" || rule.resource?.type !== "topic") continue;
      const name = String(rule.resource.name ?? "");
      const covers =
        rule.resource.patternType === "prefix" ? String(topic).startsWith(name) : name === topic || name === "*";
      const writes = (rule.operations ?? []).filter((o: string) => WRITES.has(o));
      if (covers && writes.length > 0)
        findings.push(
          `KafkaUser ${user.metadata.name as string} may ${writes.join(", ")} ${String(topic)} (${describeRule(rule)}): only events writes it`,
        );
    }
  }
  return findings;
}
