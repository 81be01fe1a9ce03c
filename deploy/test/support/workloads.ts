// Helpers over rendered objects: the pod templates, their containers, the
// secrets they reference, and which NetworkPolicies select a pod.
import type { K8sObject } from "./render.js";

export const services = ["orchestrator", "sandbox", "llm-proxy", "events"] as const;
export const ports: Record<(typeof services)[number], number> = {
  orchestrator: 7700,
  sandbox: 7701,
  "llm-proxy": 7702,
  events: 7703,
};

/* eslint-disable @typescript-eslint/no-explicit-any */
export type Any = any;

export interface Workload {
  object: K8sObject;
  kind: string;
  name: string;
  podLabels: Record<string, string>;
  pod: Any;
  /**
   * A StatefulSet's volumeClaimTemplates: each pod gets a claim per template,
   * mounted by the template's name like a volume of the pod. Empty for other kinds.
   */
  claimTemplates: Any[];
}

const workloadKinds = new Set(["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"]);

export function workloads(objects: K8sObject[]): Workload[] {
  const out: Workload[] = [];
  for (const o of objects) {
    const base = { object: o, kind: o.kind, name: o.metadata.name };
    if (workloadKinds.has(o.kind)) {
      const template = (o as Any).spec.template;
      const claimTemplates = o.kind === "StatefulSet" ? ((o as Any).spec.volumeClaimTemplates ?? []) : [];
      out.push({ ...base, podLabels: template.metadata?.labels ?? {}, pod: template.spec, claimTemplates });
    } else if (o.kind === "CronJob") {
      const template = (o as Any).spec.jobTemplate.spec.template;
      out.push({ ...base, podLabels: template.metadata?.labels ?? {}, pod: template.spec, claimTemplates: [] });
    } else if (o.kind === "Pod") {
      out.push({ ...base, podLabels: o.metadata.labels ?? {}, pod: (o as Any).spec, claimTemplates: [] });
    }
  }
  return out;
}

/** What a container's volumeMounts may name: the pod's volumes and, in a StatefulSet, its claim templates. */
export function mountableVolumes(w: Workload): Set<string> {
  return new Set([
    ...(w.pod.volumes ?? []).map((v: Any) => v.name as string),
    ...w.claimTemplates.map((t: Any) => t.metadata?.name as string),
  ]);
}

/** Replicas a workload declares: spec.replicas, which defaults to 1 for Deployments and StatefulSets. */
export function declaredReplicas(w: Workload): number {
  return (w.object as Any).spec?.replicas ?? 1;
}

export function workload(objects: K8sObject[], name: string): Workload {
  const found = workloads(objects).find((w) => w.name === name);
  if (!found) throw new Error(`no workload ${name}`);
  return found;
}

export function allContainers(pod: Any): Any[] {
  return [...(pod.initContainers ?? []), ...(pod.containers ?? []), ...(pod.ephemeralContainers ?? [])];
}

/** A pod's container (init, regular or ephemeral) by name; throws when there is none. */
export function container(pod: Any, name: string): Any {
  const found = allContainers(pod).find((c: Any) => c.name === name);
  if (!found)
    throw new Error(
      `no container ${name} (has ${allContainers(pod)
        .map((c: Any) => c.name)
        .join(", ")})`,
    );
  return found;
}

export interface SecretRef {
  how: "volume" | "projected" | "env" | "envFrom";
  secret: string;
  container?: string;
  env?: string;
}

/** Every way a pod template reads a Secret. */
export function secretRefs(pod: Any): SecretRef[] {
  const refs: SecretRef[] = [];
  for (const v of pod.volumes ?? []) {
    if (v.secret) refs.push({ how: "volume", secret: v.secret.secretName });
    for (const s of v.projected?.sources ?? []) if (s.secret) refs.push({ how: "projected", secret: s.secret.name });
  }
  for (const c of allContainers(pod)) {
    for (const e of c.env ?? []) {
      if (e.valueFrom?.secretKeyRef)
        refs.push({ how: "env", secret: e.valueFrom.secretKeyRef.name, container: c.name, env: e.name });
    }
    for (const e of c.envFrom ?? [])
      if (e.secretRef) refs.push({ how: "envFrom", secret: e.secretRef.name, container: c.name });
  }
  return refs;
}

/**
 * The Secrets one container can read, and how: env secretKeyRef, envFrom
 * secretRef, or a mount of a Secret volume (or of a projected volume with a
 * Secret source).
 */
export function containerSecretRefs(pod: Any, c: Any): SecretRef[] {
  const refs: SecretRef[] = [];
  for (const e of c.env ?? []) {
    if (e.valueFrom?.secretKeyRef)
      refs.push({ how: "env", secret: e.valueFrom.secretKeyRef.name, container: c.name, env: e.name });
  }
  for (const e of c.envFrom ?? [])
    if (e.secretRef) refs.push({ how: "envFrom", secret: e.secretRef.name, container: c.name });
  for (const m of c.volumeMounts ?? []) {
    const v = (pod.volumes ?? []).find((x: Any) => x.name === m.name);
    if (v?.secret) refs.push({ how: "volume", secret: v.secret.secretName, container: c.name });
    for (const s of v?.projected?.sources ?? [])
      if (s.secret) refs.push({ how: "projected", secret: s.secret.name, container: c.name });
  }
  return refs;
}

export function matchesSelector(selector: Any, labels: Record<string, string>): boolean {
  for (const [k, v] of Object.entries(selector?.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector?.matchExpressions ?? []) {
    const has = e.key in labels;
    if (e.operator === "In" && !(has && e.values.includes(labels[e.key]))) return false;
    if (e.operator === "NotIn" && has && e.values.includes(labels[e.key])) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

export function policiesFor(objects: K8sObject[], labels: Record<string, string>, type: "Ingress" | "Egress"): Any[] {
  return objects.filter(
    (o) =>
      o.kind === "NetworkPolicy" &&
      (o as Any).spec.policyTypes?.includes(type) &&
      matchesSelector((o as Any).spec.podSelector, labels),
  );
}

/**
 * The Service a URL in a pod's environment calls, and the port: by the
 * Service's name, or by the address Kubernetes gives a pod for it
 * (`$(NAME_SERVICE_HOST)`, where a pod resolves no names). Undefined for any
 * other host, or a URL that is not one.
 */
export function urlService(url: string): { service: string; port: number; protocol: string } | undefined {
  const parts = /^(https?):\/\/([^/:]+):(\d+)(?:\/|$)/.exec(url);
  if (!parts) return undefined;
  const [, protocol, host, port] = parts;
  const linked = /^\$\(([A-Z0-9_]+)_SERVICE_HOST\)$/.exec(host!);
  const service = linked ? linked[1]!.toLowerCase().replaceAll("_", "-") : host!;
  if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(service)) return undefined;
  return { service, port: Number(port), protocol: `${protocol}:` };
}

/** The env a container gets from its ConfigMaps (envFrom) and env. */
export function containerEnv(objects: K8sObject[], container: Any): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === from.configMapRef?.name) as Any;
    Object.assign(env, cm?.data ?? {});
  }
  for (const e of container.env ?? []) if (e.value !== undefined) env[e.name] = e.value;
  return env;
}

/** A pod as NetworkPolicy peers see it: its labels and its namespace's. */
export interface PeerPod {
  labels: Record<string, string>;
  namespace: string;
  namespaceLabels: Record<string, string>;
}

/**
 * The labels the API server gives a rendered Namespace: its own plus
 * kubernetes.io/metadata.name, which namespaceSelectors may match.
 */
export function namespaceLabels(objects: K8sObject[], name: string): Record<string, string> {
  const ns = objects.find((o) => o.kind === "Namespace" && o.metadata.name === name);
  return { ...(ns?.metadata.labels ?? {}), "kubernetes.io/metadata.name": name };
}

/** Each workload's pods as peers (all in their object's namespace). */
export function peerPods(objects: K8sObject[]): Array<PeerPod & { workload: string }> {
  return workloads(objects).map((w) => {
    const namespace = w.object.metadata.namespace ?? "default";
    return { workload: w.name, labels: w.podLabels, namespace, namespaceLabels: namespaceLabels(objects, namespace) };
  });
}

/**
 * Whether a NetworkPolicy peer (one entry of `from` or `to`) covers a pod,
 * as the API defines it: podSelector alone means the policy's own
 * namespace; namespaceSelector alone every pod of the namespaces it selects;
 * both, the pods they select together. An ipBlock may cover any pod address.
 */
export function peerCovers(peer: Any, policyNamespace: string, pod: PeerPod): boolean {
  if (peer.ipBlock) return true;
  const inNamespace = peer.namespaceSelector
    ? matchesSelector(peer.namespaceSelector, pod.namespaceLabels)
    : pod.namespace === policyNamespace;
  return inNamespace && (peer.podSelector === undefined || matchesSelector(peer.podSelector, pod.labels));
}

/** Whether a rule's ports admit a TCP port (no ports: every port). */
export function rulePortsAdmit(ports: Any[] | undefined, port: number): boolean {
  if (!ports || ports.length === 0) return true;
  // A named port could be any number: counted as admitting it, so checks stay on the safe side.
  return ports.some(
    (p: Any) =>
      (p.protocol ?? "TCP") === "TCP" &&
      (p.port === undefined || typeof p.port === "string" || (p.port <= port && port <= (p.endPort ?? p.port))),
  );
}

/** Byte count of a Kubernetes quantity like 10Gi or 500M (enough for storage requests and sizeLimits). */
export function quantityBytes(quantity: unknown): number {
  const m = /^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$/.exec(String(quantity ?? ""));
  if (!m) return Number.NaN;
  const unit: Record<string, number> = {
    "": 1,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    Pi: 2 ** 50,
    k: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    P: 1e15,
  };
  return Number(m[1]) * unit[m[2] ?? ""]!;
}
