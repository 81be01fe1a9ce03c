// The events service keeps a durable outbox and local log (OZ0_EVENTS_DATA,
// SQLite): every accepted event is written there before the relay delivers it
// to Kafka, and Watch and Transcript answer from it. So, in every overlay:
//  - it is a StatefulSet whose pod mounts a claim of its own
//    (volumeClaimTemplates) at OZ0_EVENTS_DATA, never an emptyDir: a pod
//    deleted or rescheduled while Kafka is down gets its undelivered events
//    back;
//  - it runs exactly one replica and no HorizontalPodAutoscaler scales it:
//    one log answers Watch and Transcript for every job, complete and in
//    order (producers buffer and retry while it restarts);
//  - its serviceName is a headless Service selecting its pod, and producers
//    call the `events` ClusterIP Service;
//  - its PodDisruptionBudget still lets a node drain evict the one pod.
// Each check returns its findings, so the last suite can show that each one
// fails on the mistake it is there for.
import assert from "node:assert/strict";
import path from "node:path";
import { before, describe, it } from "node:test";
import { k8sDir, overlayDirs, render, type K8sObject } from "./support/render.js";
import {
  allContainers,
  container,
  containerEnv,
  declaredReplicas,
  matchesSelector,
  ports,
  quantityBytes,
  urlService,
  workloads,
  type Any,
  type Workload,
} from "./support/workloads.js";

const EVENTS = "events";
/** The services that publish (the sandbox does not: the orchestrator publishes what a node reports of its sessions). */
const PRODUCERS = ["orchestrator", "llm-proxy"] as const;

function eventsWorkloads(objects: K8sObject[]): Workload[] {
  return workloads(objects).filter((w) => w.name === EVENTS || w.podLabels["app.kubernetes.io/name"] === EVENTS);
}

/** The one events workload, or the findings that say why there is not exactly one. */
function theEventsWorkload(objects: K8sObject[]): Workload | string {
  const found = eventsWorkloads(objects);
  if (found.length !== 1)
    return `${found.length} workloads run events pods (${found.map((w) => `${w.kind}/${w.name}`).join(", ")}): one writer expected`;
  return found[0]!;
}

/** A StatefulSet with exactly one replica, which no HorizontalPodAutoscaler scales. */
export function workloadFindings(objects: K8sObject[]): string[] {
  const w = theEventsWorkload(objects);
  if (typeof w === "string") return [w];
  const findings: string[] = [];
  if (w.kind !== "StatefulSet") findings.push(`events is a ${w.kind}, not a StatefulSet`);
  const replicas = (w.object as Any).spec?.replicas;
  if (replicas !== 1) findings.push(`events runs ${String(replicas)} replicas (spec.replicas), not exactly 1`);
  for (const hpa of objects.filter((o) => o.kind === "HorizontalPodAutoscaler") as Any[]) {
    const ref = hpa.spec?.scaleTargetRef ?? {};
    if (ref.name === w.name)
      findings.push(`HorizontalPodAutoscaler ${hpa.metadata.name} scales events (${ref.kind}/${ref.name})`);
  }
  return findings;
}

/** OZ0_EVENTS_DATA on a per-pod claim, writable by the service's uid/gid, kept when the StatefulSet goes. */
export function outboxFindings(objects: K8sObject[]): string[] {
  const w = theEventsWorkload(objects);
  if (typeof w === "string") return [w];
  const findings: string[] = [];
  let c: Any;
  try {
    c = container(w.pod, EVENTS);
  } catch (error) {
    return [String((error as Error).message)];
  }
  const data = containerEnv(objects, c).OZ0_EVENTS_DATA;
  if (!data?.startsWith("/")) return [`OZ0_EVENTS_DATA is ${String(data)}, not an absolute path`];
  // The mount that holds OZ0_EVENTS_DATA: the deepest one at or above it.
  const covering = (c.volumeMounts ?? [])
    .filter((m: Any) => data === m.mountPath || data.startsWith(`${String(m.mountPath).replace(/\/$/, "")}/`))
    .sort((a: Any, b: Any) => b.mountPath.length - a.mountPath.length);
  const mount = covering[0];
  if (!mount) return [`nothing is mounted at OZ0_EVENTS_DATA ${data}: the outbox would be in the container's root`];
  if (mount.mountPath !== data)
    findings.push(`OZ0_EVENTS_DATA ${data} is under ${mount.mountPath}, not the mount itself`);
  if (mount.readOnly === true) findings.push(`${mount.name} is mounted read-only at ${mount.mountPath}`);
  const podVolume = (w.pod.volumes ?? []).find((v: Any) => v.name === mount.name);
  if (podVolume) {
    const type = Object.keys(podVolume)
      .filter((k) => k !== "name")
      .join(", ");
    findings.push(
      `OZ0_EVENTS_DATA ${data} is on the pod volume ${mount.name} (${type})${podVolume.emptyDir ? ": an emptyDir, gone with the pod" : ""}, not a claim template`,
    );
  }
  const template = w.claimTemplates.find((t: Any) => t.metadata?.name === mount.name);
  if (!template) {
    findings.push(
      `no volumeClaimTemplate named ${mount.name} (has ${w.claimTemplates.map((t: Any) => t.metadata?.name).join(", ") || "none"})`,
    );
  } else {
    const modes: string[] = template.spec?.accessModes ?? [];
    if (!(modes.length === 1 && ["ReadWriteOnce", "ReadWriteOncePod"].includes(modes[0]!))) {
      findings.push(
        `claim template ${mount.name} access modes ${JSON.stringify(modes)}: one pod writes it (ReadWriteOnce)`,
      );
    }
    const size = quantityBytes(template.spec?.resources?.requests?.storage);
    if (!(size >= 2 ** 30))
      findings.push(
        `claim template ${mount.name} requests ${String(template.spec?.resources?.requests?.storage)}: at least 1Gi expected`,
      );
    const storageClass = template.spec?.storageClassName;
    if (storageClass !== undefined && (typeof storageClass !== "string" || storageClass === "")) {
      findings.push(
        `claim template ${mount.name} storageClassName ${JSON.stringify(storageClass)}: leave it out for the default class or name one`,
      );
    }
  }
  const retention = (w.object as Any).spec?.persistentVolumeClaimRetentionPolicy ?? {};
  for (const when of ["whenDeleted", "whenScaled"]) {
    if (retention[when] === "Delete")
      findings.push(`persistentVolumeClaimRetentionPolicy.${when}: Delete drops undelivered events with the claim`);
  }
  // The claim's root gets the pod's fsGroup: the service (uid/gid 10001) must be able to write it.
  const podSc = w.pod.securityContext ?? {};
  const gid = c.securityContext?.runAsGroup ?? podSc.runAsGroup;
  if (typeof podSc.fsGroup !== "number")
    findings.push("no fsGroup: the claim's root may not be writable by the service");
  else if (podSc.fsGroup !== gid) findings.push(`fsGroup ${podSc.fsGroup} is not the service's group ${String(gid)}`);
  if (podSc.fsGroupChangePolicy !== "OnRootMismatch")
    findings.push(
      `fsGroupChangePolicy ${String(podSc.fsGroupChangePolicy)}: OnRootMismatch spares a walk of the volume at each start`,
    );
  return findings;
}

/** serviceName names a headless Service selecting the pod; producers reach a ClusterIP Service selecting it. */
export function serviceFindings(objects: K8sObject[]): string[] {
  const w = theEventsWorkload(objects);
  if (typeof w === "string") return [w];
  const findings: string[] = [];
  const services = objects.filter((o) => o.kind === "Service") as Any[];
  const selectsEvents = (svc: Any): boolean =>
    svc.spec?.selector !== undefined &&
    matchesSelector({ matchLabels: svc.spec.selector }, w.podLabels) &&
    svc.spec.ports?.some((p: Any) => p.port === ports.events);

  const serviceName = (w.object as Any).spec?.serviceName;
  const governing = services.find((s) => s.metadata.name === serviceName);
  if (!serviceName) findings.push("the events StatefulSet names no serviceName");
  else if (!governing) findings.push(`serviceName ${serviceName} names no Service`);
  else {
    if (governing.spec.clusterIP !== "None")
      findings.push(
        `Service ${serviceName} (the StatefulSet's serviceName) is not headless (clusterIP ${String(governing.spec.clusterIP)})`,
      );
    if (!selectsEvents(governing))
      findings.push(`Service ${serviceName} does not select the events pods on ${ports.events}`);
  }

  const sandbox = workloads(objects).find((p) => p.name === "sandbox");
  for (const c of sandbox ? allContainers(sandbox.pod) : [])
    if (containerEnv(objects, c).OZ0_EVENTS_URL !== undefined)
      findings.push(`sandbox/${c.name as string}: OZ0_EVENTS_URL is set, but the sandbox publishes no events`);
  for (const name of PRODUCERS) {
    const producer = workloads(objects).find((p) => p.name === name);
    if (!producer) continue;
    const url = containerEnv(objects, container(producer.pod, name)).OZ0_EVENTS_URL;
    if (url === undefined) continue;
    const called = urlService(url);
    const hostname = called?.service;
    const port = called?.port;
    const svc = services.find((s) => s.metadata.name === hostname);
    if (!svc) findings.push(`${name}: OZ0_EVENTS_URL ${url} names no Service`);
    else if (svc.spec.clusterIP === "None") findings.push(`${name}: OZ0_EVENTS_URL ${url} names a headless Service`);
    else if (!selectsEvents(svc) || !svc.spec.ports.some((p: Any) => p.port === Number(port)))
      findings.push(`${name}: Service ${hostname} does not serve the events pods on ${port}`);
  }
  return findings;
}

/** Disruptions a PodDisruptionBudget allows with a given number of healthy pods (as the eviction API counts them). */
function allowedDisruptions(pdb: Any, replicas: number): number {
  const scaled = (v: number | string): number =>
    typeof v === "number" ? v : Math.ceil((Number(v.replace("%", "")) / 100) * replicas);
  if (pdb.spec.maxUnavailable !== undefined) return scaled(pdb.spec.maxUnavailable);
  if (pdb.spec.minAvailable !== undefined) return replicas - scaled(pdb.spec.minAvailable);
  return replicas;
}

/** With one replica, a budget that allows no disruption blocks every drain of its node. */
export function disruptionFindings(objects: K8sObject[]): string[] {
  const w = theEventsWorkload(objects);
  if (typeof w === "string") return [w];
  const findings: string[] = [];
  for (const pdb of objects.filter((o) => o.kind === "PodDisruptionBudget") as Any[]) {
    if (!matchesSelector(pdb.spec.selector, w.podLabels)) continue;
    const allowed = allowedDisruptions(pdb, declaredReplicas(w));
    if (allowed < 1)
      findings.push(
        `PodDisruptionBudget ${pdb.metadata.name} allows ${allowed} disruptions of ${declaredReplicas(w)} events pod(s): node drains would block`,
      );
  }
  return findings;
}

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`events in ${overlay}: one writer with a durable outbox`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("is a StatefulSet with exactly one replica, scaled by no HorizontalPodAutoscaler", () => {
      assert.deepEqual(workloadFindings(objects), []);
    });

    void it("keeps OZ0_EVENTS_DATA on a ReadWriteOnce claim per pod (not an emptyDir), writable through fsGroup and kept with the StatefulSet", () => {
      assert.deepEqual(outboxFindings(objects), []);
    });

    void it("names a headless Service selecting its pod as serviceName, and producers call the events ClusterIP Service", () => {
      assert.deepEqual(serviceFindings(objects), []);
    });

    void it("lets a node drain evict its one pod", () => {
      assert.deepEqual(disruptionFindings(objects), []);
    });
  });
}

void describe("the events checks catch mistakes", () => {
  let prod: K8sObject[] = [];
  before(() => {
    prod = render(path.join(k8sDir, "overlays", "prod"));
  });
  /** A copy of prod's objects with the events StatefulSet (and anything else) changed. */
  const broken = (change: (objects: K8sObject[], events: Any) => void): K8sObject[] => {
    const objects = structuredClone(prod);
    change(
      objects,
      objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === EVENTS),
    );
    return objects;
  };

  void it("holds on prod as rendered", () => {
    for (const check of [workloadFindings, outboxFindings, serviceFindings, disruptionFindings])
      assert.deepEqual(check(prod), [], check.name);
  });

  void it("the outbox back on an emptyDir", () => {
    const objects = broken((_, events) => {
      delete events.spec.volumeClaimTemplates;
      events.spec.template.spec.volumes.push({ name: "data", emptyDir: { sizeLimit: "2Gi" } });
    });
    assert.match(outboxFindings(objects).join("\n"), /pod volume data \(emptyDir\): an emptyDir, gone with the pod/);
    assert.match(outboxFindings(objects).join("\n"), /no volumeClaimTemplate named data/);
  });

  void it("OZ0_EVENTS_DATA pointing elsewhere than the claim", () => {
    const objects = broken((all) => {
      const cm = all.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("events-")) as Any;
      cm.data.OZ0_EVENTS_DATA = "/tmp/events";
    });
    assert.match(
      outboxFindings(objects).join("\n"),
      /OZ0_EVENTS_DATA \/tmp\/events is under \/tmp.*pod volume tmp \(emptyDir\)/s,
    );
  });

  void it("claims dropped with the StatefulSet, a shared access mode, no fsGroup", () => {
    const objects = broken((_, events) => {
      events.spec.persistentVolumeClaimRetentionPolicy.whenDeleted = "Delete";
      events.spec.volumeClaimTemplates[0].spec.accessModes = ["ReadWriteMany"];
      delete events.spec.template.spec.securityContext.fsGroup;
    });
    const found = outboxFindings(objects).join("\n");
    assert.match(found, /whenDeleted: Delete/);
    assert.match(found, /access modes \["ReadWriteMany"\]/);
    assert.match(found, /no fsGroup/);
  });

  void it("a Deployment, two replicas, an HPA", () => {
    assert.match(
      workloadFindings(broken((_, events) => (events.kind = "Deployment"))).join("\n"),
      /events is a Deployment, not a StatefulSet/,
    );
    assert.match(workloadFindings(broken((_, events) => (events.spec.replicas = 2))).join("\n"), /runs 2 replicas/);
    const hpa = broken((all) => {
      const orchestratorHpa = all.find((o) => o.kind === "HorizontalPodAutoscaler") as Any;
      all.push({
        ...structuredClone(orchestratorHpa),
        metadata: { name: "events", namespace: "oz0" },
        spec: {
          ...orchestratorHpa.spec,
          scaleTargetRef: { apiVersion: "apps/v1", kind: "StatefulSet", name: "events" },
        },
      });
    });
    assert.match(workloadFindings(hpa).join("\n"), /HorizontalPodAutoscaler events scales events/);
  });

  void it("a second workload running events pods", () => {
    const objects = broken((all, events) => all.push({ ...structuredClone(events), kind: "Deployment" }));
    assert.match(workloadFindings(objects).join("\n"), /2 workloads run events pods/);
  });

  void it("a governing Service that is missing or not headless, producers on the headless one", () => {
    const missing = broken((all) =>
      all.splice(
        all.findIndex((o) => o.kind === "Service" && o.metadata.name === "events-headless"),
        1,
      ),
    );
    assert.match(serviceFindings(missing).join("\n"), /serviceName events-headless names no Service/);
    const notHeadless = broken(
      (all) =>
        delete (all.find((o) => o.kind === "Service" && o.metadata.name === "events-headless") as Any).spec.clusterIP,
    );
    assert.match(serviceFindings(notHeadless).join("\n"), /is not headless/);
    const producers = broken((all) => {
      const cm = all.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("orchestrator-")) as Any;
      cm.data.OZ0_EVENTS_URL = "http://events-headless:7703";
    });
    assert.match(serviceFindings(producers).join("\n"), /orchestrator: OZ0_EVENTS_URL .* names a headless Service/);
  });

  void it("a budget that blocks drains", () => {
    const objects = broken((all) => {
      const pdb = all.find((o) => o.kind === "PodDisruptionBudget" && o.metadata.name === EVENTS) as Any;
      delete pdb.spec.maxUnavailable;
      pdb.spec.minAvailable = 1;
    });
    assert.match(disruptionFindings(objects).join("\n"), /allows 0 disruptions of 1 events pod/);
  });
});
