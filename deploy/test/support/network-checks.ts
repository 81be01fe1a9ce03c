// Who may reach what, over rendered objects, each check returning its
// findings (empty when the rule holds), so network.test.ts can also show that
// each one fails on the mistake it is there for.
import { isDeepStrictEqual } from "node:util";
import type { K8sObject } from "./render.js";
import {
  namespaceLabels,
  peerCovers,
  peerPods,
  policiesFor,
  ports,
  rulePortsAdmit,
  workload,
  type Any,
} from "./workloads.js";

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
 * Kafka's listeners ask for a credential (kafka-auth-checks.ts), and the
 * network keeps other pods from trying one: every listener is internal and names
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

/**
 * What the LLM proxy's way out excludes: private ranges, shared address space (Alibaba's metadata server), link-local
 * (every cloud's metadata endpoint), and the reserved ranges a cluster may give its pods and Services where private
 * ones run short (GKE's "class E" 240.0.0.0/4, the benchmarking 198.18.0.0/15, IETF's 192.0.0.0/24): no provider is
 * there, and a pod or Service of the cluster could be.
 */
export const EXCLUDED_FROM_INTERNET = [
  "10.0.0.0/8",
  "172.16.0.0/12",
  "192.168.0.0/16",
  "100.64.0.0/10",
  "169.254.0.0/16",
  "192.0.0.0/24",
  "198.18.0.0/15",
  "240.0.0.0/4",
];

/** Whether a pod selector can select nothing but the pods of one app (app.kubernetes.io/name). */
function selectsOnly(selector: Any, name: string): boolean {
  if (selector?.matchLabels?.["app.kubernetes.io/name"] === name) return true;
  return (selector?.matchExpressions ?? []).some(
    (e: Any) => e.key === "app.kubernetes.io/name" && e.operator === "In" && isDeepStrictEqual(e.values, [name]),
  );
}

/**
 * Only llm-proxy leaves the cluster, on 443 and not to private or
 * link-local ranges: every egress rule to an ipBlock is in a policy that
 * selects llm-proxy pods and no other (a selector that merely includes them,
 * `{}` or `NotIn: [sandbox]`, would let every such pod out), except the
 * Strimzi entity operator's, to single addresses on the API server's ports.
 */
export function internetEgressFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const policy of objects.filter((o) => o.kind === "NetworkPolicy") as Any[]) {
    const where = `NetworkPolicy ${policy.metadata.name as string}`;
    const selector = policy.spec.podSelector;
    const apiServer = (selector?.matchLabels?.["strimzi.io/name"] as string | undefined)?.endsWith("-entity-operator");
    for (const rule of policy.spec.egress ?? []) {
      for (const peer of rule.to ?? []) {
        if (!peer.ipBlock) continue;
        if (selectsOnly(selector, "llm-proxy")) {
          if (!isDeepStrictEqual(rule.ports, [{ protocol: "TCP", port: 443 }]))
            findings.push(`${where}: llm-proxy leaves on ${JSON.stringify(rule.ports)}, not 443 only`);
          for (const cidr of EXCLUDED_FROM_INTERNET)
            if (!peer.ipBlock.except?.includes(cidr)) findings.push(`${where}: ${cidr} is not excluded`);
        } else if (apiServer) {
          if (!/\/32$/.test(peer.ipBlock.cidr)) findings.push(`${where}: ${peer.ipBlock.cidr} is not one address`);
          for (const p of rule.ports ?? [])
            if (![443, 6443].includes(p.port)) findings.push(`${where}: the API server on port ${p.port}`);
          if ((rule.ports ?? []).length === 0) findings.push(`${where}: the API server on every port`);
        } else {
          findings.push(
            `${where} lets pods it selects (${JSON.stringify(selector)}) leave the cluster to ${peer.ipBlock.cidr}: only llm-proxy may`,
          );
        }
      }
    }
  }
  return findings;
}

/**
 * "Every ingress rule names its peers: none admits every pod"
 * (deploy/k8s/README.md). A rule with a `from` may still admit every pod: a
 * peer `podSelector: {}` (every pod of the namespace, sandbox pods
 * included), `namespaceSelector: {}` (every pod of every namespace: other
 * tenants), a NotIn selector, or an ipBlock (any address). So a pod that
 * carries no label, in the policy's namespace or in another one, must be
 * admitted by no peer, and no peer is an ipBlock.
 */
export function anyPodIngressFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const policy of objects.filter((o) => o.kind === "NetworkPolicy") as Any[]) {
    const namespace = policy.metadata.namespace as string;
    const strangers = [
      { where: `any pod of ${namespace}`, namespace, labels: {}, namespaceLabels: namespaceLabels(objects, namespace) },
      {
        where: "any pod of another namespace",
        namespace: "elsewhere",
        labels: {},
        namespaceLabels: { "kubernetes.io/metadata.name": "elsewhere" },
      },
    ];
    (policy.spec.ingress ?? []).forEach((rule: Any, i: number) => {
      for (const peer of rule.from ?? []) {
        const where = `NetworkPolicy ${policy.metadata.name as string} ingress[${i}]`;
        if (peer.ipBlock) {
          findings.push(`${where} admits addresses (${JSON.stringify(peer.ipBlock)}), not pods it names`);
          continue;
        }
        for (const stranger of strangers)
          if (peerCovers(peer, namespace, stranger))
            findings.push(`${where} admits ${stranger.where} through ${JSON.stringify(peer)}`);
      }
    });
  }
  return findings;
}
