// Who may reach what, over rendered objects, each check returning its
// findings (empty when the rule holds), so network.test.ts can also show that
// each one fails on the mistake it is there for.
import { isDeepStrictEqual } from "node:util";
import type { K8sObject } from "./render.js";
import { peerCovers, peerPods, policiesFor, ports, rulePortsAdmit, workload, type Any } from "./workloads.js";

/** The one peer Strimzi's listeners may name: the events pods, which alone publish to Kafka. */
export const KAFKA_CLIENT_PEERS = [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "events" } } }];

/** The labels Strimzi gives the pods of a Kafka cluster's node pool (brokers and controllers). */
function kafkaPodLabels(cluster: string, pool: string): Record<string, string> {
  return {
    "app.kubernetes.io/name": "kafka",
    "strimzi.io/cluster": cluster,
    "strimzi.io/kind": "Kafka",
    "strimzi.io/name": `${cluster}-kafka`,
    "strimzi.io/pool-name": pool,
  };
}

/**
 * Kafka's listeners are plaintext and take no credential, so the network is
 * all that keeps other pods off them: every listener is internal and names
 * the events pods as its only peers (Strimzi makes a NetworkPolicy of
 * `networkPolicyPeers`; a listener without them admits every pod of every
 * namespace), and no NetworkPolicy selecting the brokers admits a pod of
 * ours but events', nor any other namespace or address.
 */
export function kafkaFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  const pods = peerPods(objects);
  for (const kafka of objects.filter((o) => o.kind === "Kafka") as Any[]) {
    const cluster = kafka.metadata.name as string;
    for (const listener of kafka.spec?.kafka?.listeners ?? []) {
      const where = `Kafka ${cluster} listener ${listener.name as string}`;
      if (listener.type !== "internal") findings.push(`${where} is of type ${String(listener.type)}, not internal`);
      const peers = listener.networkPolicyPeers ?? [];
      if (peers.length === 0)
        findings.push(`${where} names no networkPolicyPeers: every pod of every namespace reaches it`);
      else if (!isDeepStrictEqual(peers, KAFKA_CLIENT_PEERS))
        findings.push(`${where} admits ${JSON.stringify(peers)}, not the events pods alone`);
    }
    const pools = (objects as Any[]).filter(
      (o) => o.kind === "KafkaNodePool" && o.metadata.labels?.["strimzi.io/cluster"] === cluster,
    );
    for (const pool of pools) {
      for (const policy of policiesFor(objects, kafkaPodLabels(cluster, pool.metadata.name), "Ingress")) {
        const where = `NetworkPolicy ${policy.metadata.name as string}`;
        for (const rule of policy.spec.ingress ?? []) {
          for (const peer of rule.from ?? []) {
            if (peer.ipBlock || peer.namespaceSelector)
              findings.push(`${where} lets ${JSON.stringify(peer)} reach the Kafka pods: another namespace or address`);
            for (const p of pods)
              if (p.workload !== "events" && peerCovers(peer, policy.metadata.namespace, p))
                findings.push(`${where} lets ${p.workload} pods reach the Kafka pods`);
          }
        }
      }
    }
  }
  return findings;
}

/** Who publishes to the events service: the sandbox does not (the orchestrator publishes what a node reports). */
export const EVENTS_CALLERS = ["orchestrator", "llm-proxy"];

/**
 * The events service (7703) is called by its producers and nothing else,
 * checked at both ends: no NetworkPolicy selecting its pods admits a pod of
 * ours but theirs, another namespace or an address, and no NetworkPolicy
 * selecting sandbox pods lets them reach it, on any port.
 */
export function eventsFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  const pods = peerPods(objects);
  const events = pods.find((p) => p.workload === "events")!;
  const admitted = new Set<string>();
  for (const policy of policiesFor(objects, workload(objects, "events").podLabels, "Ingress")) {
    const where = `NetworkPolicy ${policy.metadata.name as string}`;
    for (const rule of policy.spec.ingress ?? []) {
      for (const peer of rule.from ?? []) {
        if (peer.ipBlock || peer.namespaceSelector)
          findings.push(`${where} lets ${JSON.stringify(peer)} call events: another namespace or address`);
        for (const p of pods) {
          if (!peerCovers(peer, policy.metadata.namespace, p)) continue;
          if (!EVENTS_CALLERS.includes(p.workload)) findings.push(`${where} lets ${p.workload} pods call events`);
          else if (rulePortsAdmit(rule.ports, ports.events)) admitted.add(p.workload);
        }
      }
    }
  }
  for (const caller of EVENTS_CALLERS)
    if (!admitted.has(caller)) findings.push(`${caller} pods cannot reach events on ${ports.events}`);
  const sandbox = workload(objects, "sandbox");
  for (const policy of policiesFor(objects, sandbox.podLabels, "Egress")) {
    for (const rule of policy.spec.egress ?? []) {
      if ((rule.to ?? []).some((peer: Any) => peerCovers(peer, policy.metadata.namespace, events)))
        findings.push(`NetworkPolicy ${policy.metadata.name as string} lets sandbox pods reach events`);
    }
  }
  return findings;
}
