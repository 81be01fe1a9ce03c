// Every overlay renders with kustomize, and every rendered object passes the
// offline schema checks: kubernetes-models' validators, the unknown-field
// walk, and (for Strimzi's kinds) the CRD schemas kept in deploy/k8s/crds.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { before, describe, it } from "node:test";
import { parse } from "yaml";
import { crdDir, loadCrdSchemas, validateCustomResource } from "./support/crd-schema.js";
import { hasModel, objectMeta, unknownFields, unknownFieldsAs, validateWithModel } from "./support/k8s-schema.js";
import { id, k8sDir, overlayDirs, render, renderer, type K8sObject } from "./support/render.js";
import {
  allContainers,
  container,
  containerEnv,
  matchesSelector,
  mountableVolumes,
  quantityBytes,
  secretRefs,
  workload,
  workloads,
  type Any,
} from "./support/workloads.js";

const crdSchemas = loadCrdSchemas();

/**
 * kustomize wraps long base64 in Secret data over several lines; the API
 * server's decoder (Go's encoding/base64) skips the line breaks, the
 * kubernetes-models "byte" format does not, so they are joined first.
 */
function joinBase64Lines(object: K8sObject): K8sObject {
  if (object.kind !== "Secret" || typeof object.data !== "object" || object.data === null) return object;
  const data = Object.fromEntries(
    Object.entries(object.data as Record<string, string>).map(([k, v]) => [k, v.replace(/[\r\n]/g, "")]),
  );
  return { ...object, data };
}

async function schemaErrors(objects: K8sObject[]): Promise<string[]> {
  const errors: string[] = [];
  const builtIn = objects.filter((o) => hasModel(o.apiVersion, o.kind)).map(joinBase64Lines);
  for (const object of builtIn) {
    for (const e of await validateWithModel(object)) errors.push(`${id(object)}: ${e}`);
  }
  for (const [object, found] of unknownFields(builtIn)) {
    for (const e of found) errors.push(`${id(object)}: ${e}`);
  }
  for (const object of objects.filter((o) => !hasModel(o.apiVersion, o.kind))) {
    for (const e of validateCustomResource(object, crdSchemas)) errors.push(`${id(object)}: ${e}`);
    for (const e of unknownFieldsAs(object.metadata, objectMeta, ".metadata")) errors.push(`${id(object)}: ${e}`);
  }
  return errors;
}

void describe("kustomize", () => {
  void it("has a renderer (kubectl kustomize or kustomize build)", () => {
    assert.ok(renderer().describe);
  });

  void it("finds the dev and prod overlays and the component examples", () => {
    const names = overlayDirs().map((d) => path.basename(d));
    for (const name of ["dev", "prod", "dev-bubblewrap", "prod-gvisor", "prod-kata"])
      assert.ok(names.includes(name), name);
  });

  void it("renders the base on its own", () => {
    const kinds = new Set(render(path.join(k8sDir, "base")).map((o) => o.kind));
    for (const kind of [
      "Namespace",
      "Deployment",
      "StatefulSet",
      "Service",
      "ServiceAccount",
      "ConfigMap",
      "PodDisruptionBudget",
      "NetworkPolicy",
    ]) {
      assert.ok(kinds.has(kind), kind);
    }
  });
});

for (const dir of overlayDirs()) {
  void describe(`overlay ${path.basename(dir)}`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("renders objects with unique kind/name", () => {
      assert.ok(objects.length > 20);
      const seen = new Set<string>();
      for (const o of objects) {
        const key = `${o.apiVersion}|${id(o)}|${o.metadata.namespace ?? ""}`;
        assert.ok(!seen.has(key), `duplicate ${key}`);
        seen.add(key);
      }
    });

    void it("has a schema for every kind it renders", () => {
      const missing = objects
        .filter((o) => !hasModel(o.apiVersion, o.kind) && !crdSchemas.has(`${o.apiVersion}|${o.kind}`))
        .map((o) => `${o.apiVersion} ${o.kind}`);
      assert.deepEqual(missing, []);
    });

    void it("passes the Kubernetes and Strimzi schemas with no unknown fields", async () => {
      assert.deepEqual(await schemaErrors(objects), []);
    });

    void it("resolves every reference: selectors, ports, ConfigMaps, ServiceAccounts, Secrets, scale targets", () => {
      const pods = workloads(objects);
      const named = (kind: string, name: string): boolean =>
        objects.some((o) => o.kind === kind && o.metadata.name === name);
      // Secrets the operator creates (deploy/k8s/README.md), not rendered in prod.
      const operatorSecrets = new Set([
        "llm-proxy-keys",
        "oz0-postgres",
        "oz0-llm-proxy-postgres",
        "oz0-node-token",
        "oz0-node-for-sandbox-token",
        "oz0-orchestrator-token",
        "oz0-orchestrator-for-sandbox-token",
        "oz0-sandbox-token",
        "oz0-llm-proxy-token",
        "oz0-events-token",
      ]);
      // Secrets Strimzi's User Operator writes for the KafkaUsers rendered here: each user's password, in a Secret of
      // the user's name (the Kafka's userOperator sets no secretPrefix).
      for (const user of objects.filter((o) => o.kind === "KafkaUser")) operatorSecrets.add(user.metadata.name);
      // ConfigMaps the operator creates in prod (dev generates them).
      const operatorConfigMaps = new Set(["oz0-service-token-digests", "oz0-node-identity"]);
      for (const svc of objects.filter((o) => o.kind === "Service") as Any[]) {
        const targets = pods.filter((w) => matchesSelector({ matchLabels: svc.spec.selector }, w.podLabels));
        assert.ok(targets.length > 0, `Service ${svc.metadata.name} selects no pod`);
        for (const port of svc.spec.ports) {
          for (const w of targets) {
            const cports = allContainers(w.pod).flatMap((c: Any) => c.ports ?? []);
            const found =
              typeof port.targetPort === "string"
                ? cports.some((p: Any) => p.name === port.targetPort)
                : cports.some((p: Any) => p.containerPort === (port.targetPort ?? port.port));
            assert.ok(found, `Service ${svc.metadata.name} port ${port.name} → ${w.name}`);
          }
        }
      }
      for (const pdb of objects.filter((o) => o.kind === "PodDisruptionBudget") as Any[]) {
        assert.equal(
          pods.filter((w) => matchesSelector(pdb.spec.selector, w.podLabels)).length,
          1,
          `PDB ${pdb.metadata.name}`,
        );
      }
      for (const hpa of objects.filter((o) => o.kind === "HorizontalPodAutoscaler") as Any[]) {
        assert.ok(named(hpa.spec.scaleTargetRef.kind, hpa.spec.scaleTargetRef.name), `HPA ${hpa.metadata.name}`);
      }
      for (const w of pods) {
        assert.ok(
          matchesSelector((w.object as Any).spec.selector, w.podLabels),
          `${w.name} selector matches its template`,
        );
        assert.ok(named("ServiceAccount", w.pod.serviceAccountName), `${w.name} ServiceAccount`);
        const volumes = mountableVolumes(w);
        for (const t of w.claimTemplates) {
          // The controller would put the claim in place of a pod volume of the same name: say which one is meant.
          assert.ok(
            !(w.pod.volumes ?? []).some((v: Any) => v.name === t.metadata.name),
            `${w.name}: claim template ${t.metadata.name} is also a pod volume`,
          );
        }
        if (w.kind === "StatefulSet") {
          const governing = objects.find(
            (o) => o.kind === "Service" && o.metadata.name === (w.object as Any).spec.serviceName,
          ) as Any;
          assert.ok(governing, `${w.name}: serviceName ${(w.object as Any).spec.serviceName} names a Service`);
          assert.equal(governing.spec.clusterIP, "None", `${w.name}: its governing Service is headless`);
        }
        for (const v of w.pod.volumes ?? []) {
          if (v.configMap)
            assert.ok(
              named("ConfigMap", v.configMap.name) || operatorConfigMaps.has(v.configMap.name),
              `${w.name} volume ConfigMap ${v.configMap.name}`,
            );
          if (v.persistentVolumeClaim)
            assert.ok(named("PersistentVolumeClaim", v.persistentVolumeClaim.claimName), `${w.name} PVC`);
        }
        for (const c of allContainers(w.pod)) {
          for (const e of c.envFrom ?? [])
            if (e.configMapRef)
              assert.ok(named("ConfigMap", e.configMapRef.name), `${w.name} envFrom ${e.configMapRef.name}`);
          for (const e of c.env ?? []) {
            const ref = e.valueFrom?.configMapKeyRef;
            if (!ref) continue;
            const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === ref.name) as Any;
            if (cm)
              assert.ok(
                ref.key in (cm.data ?? {}),
                `${w.name}/${c.name} ${e.name}: ConfigMap ${ref.name} has no key ${ref.key}`,
              );
            else assert.ok(operatorConfigMaps.has(ref.name), `${w.name}/${c.name} ${e.name}: ConfigMap ${ref.name}`);
          }
          for (const m of c.volumeMounts ?? []) assert.ok(volumes.has(m.name), `${w.name}/${c.name} mounts ${m.name}`);
        }
        for (const ref of secretRefs(w.pod)) {
          assert.ok(named("Secret", ref.secret) || operatorSecrets.has(ref.secret), `${w.name} Secret ${ref.secret}`);
        }
      }
      for (const np of objects.filter((o) => o.kind === "NetworkPolicy") as Any[]) {
        const strimzi = Object.keys(np.spec.podSelector.matchLabels ?? {}).some((k) => k.startsWith("strimzi.io/"));
        if (!strimzi)
          assert.ok(
            pods.some((w) => matchesSelector(np.spec.podSelector, w.podLabels)),
            `NetworkPolicy ${np.metadata.name} selects no pod`,
          );
        const peers = [
          ...(np.spec.ingress ?? []).flatMap((r: Any) => r.from ?? []),
          ...(np.spec.egress ?? []).flatMap((r: Any) => r.to ?? []),
        ];
        for (const peer of peers) {
          const app = peer.podSelector?.matchLabels?.["app.kubernetes.io/name"];
          if (app && !peer.namespaceSelector)
            assert.ok(
              pods.some((w) => w.podLabels["app.kubernetes.io/name"] === app),
              `NetworkPolicy ${np.metadata.name} peer ${app}`,
            );
        }
      }
    });

    // Past the data emptyDir's sizeLimit the kubelet evicts the sandbox pod with every session; the disk guard stops
    // the session filling it first only if it is told the same limit.
    void it("tells the sandbox's disk guard its data volume's sizeLimit", () => {
      const sandbox = workload(objects, "sandbox");
      const limit = sandbox.pod.volumes?.find((v: Any) => v.name === "data")?.emptyDir?.sizeLimit;
      const env = containerEnv(objects, container(sandbox.pod, "sandbox"));
      assert.equal(Number(env.OZ0_SANDBOX_DISK_LIMIT_BYTES), quantityBytes(limit), `sizeLimit ${limit}`);
    });

    void it("puts every namespaced object in the oz0 namespace", () => {
      const clusterScoped = new Set(["Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding"]);
      for (const o of objects.filter((x) => !clusterScoped.has(x.kind))) {
        assert.equal(o.metadata.namespace, "oz0", id(o));
      }
    });
  });
}

void describe("the schema checks catch mistakes", () => {
  let prod: K8sObject[] = [];
  before(() => {
    prod = render(path.join(k8sDir, "overlays", "prod"));
  });
  const copy = <T>(x: T): T => structuredClone(x);
  const find = (kind: string, name?: string): K8sObject => {
    const found = prod.find((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
    assert.ok(found, `${kind} ${name ?? ""}`);
    return copy(found);
  };

  void it("an unknown field in a Deployment (which kubernetes-models alone lets through)", async () => {
    const deployment = find("Deployment", "sandbox") as Any;
    deployment.spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem = true;
    assert.deepEqual(await validateWithModel(deployment), []);
    const errors = await schemaErrors([deployment]);
    assert.equal(errors.length, 1);
    assert.match(errors[0]!, /containers\[0\]\.securityContext\.readOnlyRootFileSystem: unknown field/);
  });

  void it("a wrong type", async () => {
    const deployment = find("Deployment", "orchestrator") as Any;
    deployment.spec.replicas = "two";
    assert.match((await schemaErrors([deployment])).join("\n"), /replicas/);
  });

  void it("a misspelt grpc probe field", async () => {
    const statefulSet = find("StatefulSet", "events") as Any;
    statefulSet.spec.template.spec.containers[0].livenessProbe.grpc.serviceName = "liveness";
    assert.match((await schemaErrors([statefulSet])).join("\n"), /livenessProbe\.grpc\.serviceName: unknown field/);
  });

  void it("an unknown field in a StatefulSet's claim template", async () => {
    const statefulSet = find("StatefulSet", "events") as Any;
    statefulSet.spec.volumeClaimTemplates[0].spec.storageClass = "fast";
    assert.match(
      (await schemaErrors([statefulSet])).join("\n"),
      /volumeClaimTemplates\[0\]\.spec\.storageClass: unknown field/,
    );
  });

  void it("an unknown field, a bad enum and a missing field in Strimzi objects", async () => {
    const kafka = find("Kafka") as Any;
    kafka.spec.kafka.replicas = 3; // gone in kafka.strimzi.io/v1 (node pools hold replicas)
    const pool = find("KafkaNodePool") as Any;
    pool.spec.roles = ["broker", "zookeeper"];
    const topic = find("KafkaTopic") as Any;
    topic.spec.partitions = 0;
    const errors = (await schemaErrors([kafka, pool, topic])).join("\n");
    assert.match(errors, /Kafka\/oz0-kafka: \.spec\.kafka\.replicas: unknown field/);
    assert.match(errors, /KafkaNodePool\/dual-role: \.spec\.roles\[1\]: "zookeeper" is not one of/);
    assert.match(errors, /\.spec\.partitions: 0 < minimum 1/);
    delete pool.spec.storage;
    assert.match((await schemaErrors([pool])).join("\n"), /missing required field "storage"/);
    // Authentication, authorization and users: v1 dropped `oauth` listeners and an ACL's single `operation`.
    kafka.spec.kafka.listeners[0].authentication.type = "oauth";
    kafka.spec.kafka.authorization.type = "keycloak";
    const user = find("KafkaUser") as Any;
    user.spec.authorization.acls[0].operation = "Write";
    delete user.spec.authorization.acls[0].operations;
    user.spec.authorization.acls[0].resource.patternType = "regex";
    const authErrors = (await schemaErrors([kafka, user])).join("\n");
    assert.match(authErrors, /\.listeners\[0\]\.authentication\.type: "oauth" is not one of/);
    assert.match(authErrors, /\.spec\.kafka\.authorization\.type: "keycloak" is not one of/);
    assert.match(authErrors, /KafkaUser\/oz0-events: .*\.acls\[0\]\.operation: unknown field/);
    assert.match(authErrors, /\.acls\[0\]: missing required field "operations"/);
    assert.match(authErrors, /\.acls\[0\]\.resource\.patternType: "regex" is not one of/);
  });

  void it("a Strimzi object with an API version the kept CRDs do not serve", async () => {
    const kafka = find("Kafka");
    kafka.apiVersion = "kafka.strimzi.io/v1beta1";
    assert.match((await schemaErrors([kafka])).join("\n"), /no CRD schema kept/);
  });
});

void describe("the kept Strimzi CRDs", () => {
  void it("serve kafka.strimzi.io/v1 Kafka, KafkaNodePool, KafkaTopic and KafkaUser", () => {
    for (const kind of ["Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser"]) {
      assert.ok(crdSchemas.has(`kafka.strimzi.io/v1|${kind}`), kind);
    }
  });

  void it("each have exactly one storage version, which is served (or an API server refuses to install them)", () => {
    const files = readdirSync(crdDir).filter((f) => f.endsWith(".yaml"));
    assert.equal(files.length, 4);
    for (const file of files) {
      const crd = parse(readFileSync(path.join(crdDir, file), "utf8")) as Any;
      assert.equal(crd.apiVersion, "apiextensions.k8s.io/v1", file);
      assert.equal(
        crd.metadata.name,
        `${crd.spec.names.plural}.${crd.spec.group}`,
        `${file}: the name is <plural>.<group>`,
      );
      const storage = crd.spec.versions.filter((v: Any) => v.storage === true);
      assert.equal(storage.length, 1, `${file}: ${storage.length} storage versions`);
      assert.equal(storage[0].served, true, `${file}: the storage version is served`);
    }
  });
});
