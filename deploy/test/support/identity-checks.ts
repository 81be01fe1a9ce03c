// The identity rules of issue 19 over rendered objects, each returning its
// findings (empty when the rule holds), so the tests can also show that each
// one fails on the mistake it is there for.
import { isDeepStrictEqual } from "node:util";
// Who accepts whom, and the variable that carries each digest: the services' own rule, so the manifests are held to it.
import {
  ACCEPTED_PEERS,
  audienceTokenVariable,
  credentialName,
  OWN_AUDIENCE_CREDENTIALS,
  peerVariable,
} from "@oz0/serving";
import type { K8sObject } from "./render.js";
import {
  allContainers,
  container,
  containerEnv,
  peerCovers,
  peerPods,
  policiesFor,
  ports,
  rulePortsAdmit,
  services,
  workload,
  workloads,
  type Any,
} from "./workloads.js";

type Service = (typeof services)[number];

/** The orchestrator's public API, and its node API (OZ0_NODE_PORT): the one port sandbox pods may reach. */
export const PUBLIC_PORT = ports.orchestrator;
export const NODE_PORT = 7710;

/**
 * The only peers that may reach the orchestrator's public API: the ingress
 * controller's namespace, namespaces labelled as clients, and pods of its own
 * namespace labelled as clients (deploy/k8s/README.md, "Who may call what").
 */
export const CLIENT_PEERS = [
  { namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "ingress-nginx" } } },
  { namespaceSelector: { matchLabels: { "oz0.dev/client": "true" } } },
  { podSelector: { matchLabels: { "oz0.dev/client": "true" } } },
];

const DIGESTS = /^oz0-service-token-digests(-[a-z0-9]+)?$/;

const networkPolicies = (objects: K8sObject[]): Any[] => objects.filter((o) => o.kind === "NetworkPolicy");

/** Ingress rules without `from` admit every pod (of every namespace). */
export function ingressWithoutFromFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const policy of networkPolicies(objects)) {
    (policy.spec.ingress ?? []).forEach((rule: Any, i: number) => {
      if ((rule.from ?? []).length === 0)
        findings.push(`NetworkPolicy ${policy.metadata.name} ingress[${i}] has no "from": it admits every pod`);
    });
  }
  return findings;
}

/** 7700 admits only the client selectors, none of which covers a pod of ours; and it admits them. */
export function publicApiFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  const orchestrator = workload(objects, "orchestrator");
  const pods = peerPods(objects);
  const admitted: Any[] = [];
  for (const policy of policiesFor(objects, orchestrator.podLabels, "Ingress")) {
    const where = `NetworkPolicy ${policy.metadata.name}`;
    for (const rule of policy.spec.ingress ?? []) {
      if (!rulePortsAdmit(rule.ports, PUBLIC_PORT)) continue;
      if ((rule.from ?? []).length === 0) findings.push(`${where}: 7700 is open to every pod`);
      for (const peer of rule.from ?? []) {
        admitted.push(peer);
        if (!CLIENT_PEERS.some((c) => isDeepStrictEqual(c, peer)))
          findings.push(`${where}: 7700 admits ${JSON.stringify(peer)}, not one of the client selectors`);
        for (const pod of pods) {
          if (peerCovers(peer, policy.metadata.namespace, pod))
            findings.push(
              `${where}: ${pod.workload} pods reach the orchestrator's public API through ${JSON.stringify(peer)}`,
            );
        }
      }
    }
  }
  for (const client of CLIENT_PEERS) {
    if (!admitted.some((peer) => isDeepStrictEqual(peer, client)))
      findings.push(`7700 does not admit the clients ${JSON.stringify(client)}`);
  }
  return findings;
}

/** Sandbox pods reach the orchestrator on its node port only, as the orchestrator's ingress and the sandbox's egress both say. */
export function sandboxToOrchestratorFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  const orchestrator = workload(objects, "orchestrator");
  const sandbox = workload(objects, "sandbox");
  const sandboxPod = peerPods(objects).find((p) => p.workload === "sandbox")!;
  const orchestratorPod = peerPods(objects).find((p) => p.workload === "orchestrator")!;
  const orchestratorPorts = [
    ...new Set([
      PUBLIC_PORT,
      NODE_PORT,
      ...allContainers(orchestrator.pod).flatMap((c: Any) =>
        (c.ports ?? []).map((p: Any) => p.containerPort as number),
      ),
    ]),
  ];
  let admittedAtNodePort = false;
  for (const policy of policiesFor(objects, orchestrator.podLabels, "Ingress")) {
    for (const rule of policy.spec.ingress ?? []) {
      if (!(rule.from ?? []).some((peer: Any) => peerCovers(peer, policy.metadata.namespace, sandboxPod))) continue;
      for (const port of orchestratorPorts) {
        const admits = rulePortsAdmit(rule.ports, port);
        if (admits && port !== NODE_PORT)
          findings.push(`NetworkPolicy ${policy.metadata.name} admits sandbox pods at the orchestrator's ${port}`);
        if (admits && port === NODE_PORT) admittedAtNodePort = true;
      }
    }
  }
  let leavesToNodePort = false;
  for (const policy of policiesFor(objects, sandbox.podLabels, "Egress")) {
    for (const rule of policy.spec.egress ?? []) {
      if (!(rule.to ?? []).some((peer: Any) => peerCovers(peer, policy.metadata.namespace, orchestratorPod))) continue;
      for (const port of orchestratorPorts) {
        const admits = rulePortsAdmit(rule.ports, port);
        if (admits && port !== NODE_PORT)
          findings.push(`NetworkPolicy ${policy.metadata.name} lets sandbox pods reach the orchestrator's ${port}`);
        if (admits && port === NODE_PORT) leavesToNodePort = true;
      }
    }
  }
  if (!admittedAtNodePort || !leavesToNodePort)
    findings.push("sandbox heartbeats cannot reach the orchestrator's node port");
  const env = containerEnv(objects, container(orchestrator.pod, "orchestrator"));
  if (Number(env.OZ0_NODE_PORT) !== NODE_PORT)
    findings.push(`the orchestrator's OZ0_NODE_PORT is ${String(env.OZ0_NODE_PORT)}, not ${NODE_PORT}`);
  return findings;
}

const isServiceContainer = (workloadName: string, c: Any): boolean =>
  (services as readonly string[]).includes(c.name) && c.name === workloadName;

/** Each container gets exactly the peer digests the design says, each the digest of what that peer sends it, from the digests ConfigMap, and no other. */
export function peerDigestFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const w of workloads(objects)) {
    for (const c of allContainers(w.pod)) {
      const where = `${w.name}/${c.name}`;
      const expected = isServiceContainer(w.name, c) ? ACCEPTED_PEERS[c.name as Service].map(peerVariable).sort() : [];
      const given = (c.env ?? []).filter((e: Any) => /^OZ0_PEER_/.test(e.name));
      const names = given.map((e: Any) => e.name as string).sort();
      if (!isDeepStrictEqual(names, expected))
        findings.push(
          `${where} has ${names.join(", ") || "no peer digest"}, the design says ${expected.join(", ") || "none"}`,
        );
      for (const e of given) {
        const ref = e.valueFrom?.configMapKeyRef;
        const peer = (services as readonly string[]).find((s) => peerVariable(s as Service) === e.name);
        const key = peer ? credentialName(peer as Service, c.name as Service) : "?";
        if (!ref || !DIGESTS.test(ref.name) || ref.key !== key)
          findings.push(`${where} ${e.name} does not come from oz0-service-token-digests, key ${key}`);
      }
      for (const name of Object.keys(containerEnv(objects, c))) {
        if (/^OZ0_PEER_/.test(name)) findings.push(`${where} gets ${name} from a ConfigMap read wholesale`);
      }
    }
  }
  return findings;
}

/**
 * Each service container holds its own token, and its token for each audience of its own (the orchestrator's for
 * sandboxes), each from its own Secret; no other container holds one.
 */
export function serviceTokenFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  const isTokenVariable = (name: string): boolean =>
    name === "OZ0_SERVICE_TOKEN" || name.startsWith("OZ0_SERVICE_TOKEN_FOR_");
  for (const w of workloads(objects)) {
    for (const c of allContainers(w.pod)) {
      const where = `${w.name}/${c.name}`;
      const entries = (c.env ?? []).filter((e: Any) => isTokenVariable(e.name));
      for (const [name, value] of Object.entries(containerEnv(objects, c))) {
        if (isTokenVariable(name) && value !== undefined && !entries.some((e: Any) => e.name === name))
          findings.push(`${where} gets ${name} from a ConfigMap`);
      }
      if (!isServiceContainer(w.name, c)) {
        for (const e of entries) findings.push(`${where} holds a service token (${e.name as string})`);
        continue;
      }
      const expected = new Map<string, string>([["OZ0_SERVICE_TOKEN", c.name]]);
      for (const audience of OWN_AUDIENCE_CREDENTIALS[c.name as Service] ?? [])
        expected.set(audienceTokenVariable(audience), credentialName(c.name as Service, audience));
      for (const [variable, secret] of expected) {
        const given = entries.filter((e: Any) => e.name === variable);
        const ref = given.length === 1 ? given[0].valueFrom?.secretKeyRef : undefined;
        if (!ref || !new RegExp(`^oz0-${secret}-token(-[a-z0-9]+)?$`).test(ref.name) || ref.key !== "token")
          findings.push(`${where}: ${variable} is not key "token" of its own Secret oz0-${secret}-token`);
      }
      for (const e of entries) {
        if (!expected.has(e.name))
          findings.push(`${where} holds ${e.name as string}, which the design does not give it`);
      }
    }
  }
  return findings;
}
