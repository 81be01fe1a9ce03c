// Several replicas on PostgreSQL (issue 13): what each rendered overlay wires
// so orchestrators, sandbox nodes and LLM proxies can run side by side: the
// shared OZ0_HOME volume, the database and the node registration.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { before, describe, it } from "node:test";
import { deployDir, overlayDirs, render, type K8sObject } from "./support/render.js";
import {
  allContainers,
  container,
  containerEnv,
  policiesFor,
  urlService,
  workload,
  workloads,
  type Any,
} from "./support/workloads.js";

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`shared OZ0_HOME in ${overlay}`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("mounts one volume at the orchestrators' OZ0_HOME and its plugins/ read-only at the same path in sandbox pods", () => {
      const orchestrator = workload(objects, "orchestrator");
      const sandbox = workload(objects, "sandbox");
      const home = containerEnv(objects, container(orchestrator.pod, "orchestrator")).OZ0_HOME;
      assert.ok(home?.startsWith("/"), "OZ0_HOME is an absolute path");
      const claimOf = (pod: Any, volume: string): string | undefined =>
        pod.volumes.find((v: Any) => v.name === volume)?.persistentVolumeClaim?.claimName;

      const homeMount = container(orchestrator.pod, "orchestrator").volumeMounts.find((m: Any) => m.mountPath === home);
      assert.ok(homeMount, "the orchestrator mounts a volume at OZ0_HOME");
      assert.notEqual(homeMount.readOnly, true, "the orchestrator writes plugin copies and artifacts there");
      assert.equal(homeMount.subPath, undefined);
      const claim = claimOf(orchestrator.pod, homeMount.name);
      assert.ok(claim, "OZ0_HOME is a PersistentVolumeClaim, not a pod's own emptyDir");

      // Only the container that runs harnesses reads plugins (not the node-heartbeat sidecar of prod).
      const pluginMounts = allContainers(sandbox.pod).flatMap((c: Any) =>
        (c.volumeMounts ?? [])
          .filter((m: Any) => claimOf(sandbox.pod, m.name) === claim)
          .map((m: Any) => ({ ...m, container: c.name })),
      );
      assert.deepEqual(
        pluginMounts.map((m: Any) => m.container),
        ["sandbox"],
        "the sandbox container, and it alone, mounts the shared volume, once",
      );
      const [plugins] = pluginMounts;
      // A session's plugin_dir is a path under OZ0_HOME/plugins on the orchestrator: the same path on the node.
      assert.equal(plugins.mountPath, `${home}/plugins`);
      assert.equal(
        plugins.subPath,
        "plugins",
        "only plugin copies: harness code never sees artifacts or the orchestrator's files",
      );
      assert.equal(plugins.readOnly, true, "sandboxes only read plugin copies");

      for (const w of workloads(objects)) {
        if (w.name === "orchestrator" || w.name === "sandbox") continue;
        assert.ok(
          !(w.pod.volumes ?? []).some((v: Any) => v.persistentVolumeClaim?.claimName === claim),
          `${w.name} mounts ${claim}`,
        );
      }
      for (const w of [orchestrator, sandbox]) {
        // fsGroup makes the volume writable for uid 10001; OnRootMismatch spares a walk of it at each start.
        assert.equal(w.pod.securityContext.fsGroupChangePolicy, "OnRootMismatch", w.name);
      }

      const pvc = objects.find((o) => o.kind === "PersistentVolumeClaim" && o.metadata.name === claim) as Any;
      assert.ok(pvc, `PersistentVolumeClaim ${claim}`);
      const replicas = [orchestrator, sandbox].map((w) => (w.object as Any).spec.replicas as number);
      if (replicas.every((r) => r === 1) && overlay.startsWith("dev")) {
        // A local cluster's local-path class: one node, where both pods then run.
        assert.deepEqual(pvc.spec.accessModes, ["ReadWriteOnce"]);
      } else {
        assert.deepEqual(pvc.spec.accessModes, ["ReadWriteMany"], "pods on several nodes mount it at once");
      }
    });
  });
}

const repoRoot = path.resolve(deployDir, "..");

/** A container's env entry (value or valueFrom) by name. */
function envEntry(container: Any, name: string): Any {
  return (container.env ?? []).find((e: Any) => e.name === name);
}

const prodOverlays = overlayDirs().filter((d) => path.basename(d).startsWith("prod"));
const devOverlays = overlayDirs().filter((d) => path.basename(d).startsWith("dev"));

for (const dir of prodOverlays) {
  const overlay = path.basename(dir);
  void describe(`${overlay}: orchestrators, sandbox nodes and LLM proxies on PostgreSQL`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("runs several orchestrator replicas, each on PostgreSQL with its pod name as replica id", () => {
      const { object, pod } = workload(objects, "orchestrator");
      assert.ok((object as Any).spec.replicas >= 2);
      const c = container(pod, "orchestrator");
      assert.deepEqual(envEntry(c, "DATABASE_URL")?.valueFrom, {
        secretKeyRef: { name: "oz0-postgres", key: "database-url" },
      });
      assert.deepEqual(envEntry(c, "OZ0_REPLICA_ID")?.valueFrom, { fieldRef: { fieldPath: "metadata.name" } });
      const env = containerEnv(objects, c);
      assert.equal(env.OZ0_DATABASE_SCHEMA, "oz0");
      assert.ok(Number(env.OZ0_LEASE_TTL_MS) >= 1000, "OZ0_LEASE_TTL_MS is set");
      assert.equal(env.OZ0_SANDBOX_URLS, undefined, "nodes register themselves: no fixed sandbox list");
    });

    void it("registers every sandbox node with heartbeats to the orchestrator Service, with the orchestrators' node token, from a node-heartbeat sidecar", () => {
      const orchestrator = container(workload(objects, "orchestrator").pod, "orchestrator");
      const sandboxPod = workload(objects, "sandbox").pod;
      const sandbox = container(sandboxPod, "sandbox");
      const heartbeat = container(sandboxPod, "node-heartbeat");
      assert.ok(sandboxPod.containers.includes(heartbeat), "a regular container, running beside the sandbox");
      const token = envEntry(orchestrator, "OZ0_NODE_TOKEN")?.valueFrom?.secretKeyRef;
      assert.deepEqual(token, { name: "oz0-node-token", key: "token" });
      assert.deepEqual(
        envEntry(heartbeat, "OZ0_NODE_TOKEN")?.valueFrom,
        { secretKeyRef: token },
        "the same Secret and key on both sides",
      );

      // The sandbox's own image, another entry point beside the one the Dockerfile starts (services/sandbox/dist/main.js,
      // from WORKDIR /app): the sandbox package's oz0-sandbox-heartbeat.
      assert.equal(heartbeat.image, sandbox.image);
      assert.deepEqual(heartbeat.command, ["node", "services/sandbox/dist/heartbeat-main.js"]);
      assert.equal(heartbeat.args, undefined);
      const sandboxPackage = JSON.parse(readFileSync(path.join(repoRoot, "services/sandbox/package.json"), "utf8")) as {
        bin?: Record<string, string>;
      };
      assert.equal(sandboxPackage.bin?.["oz0-sandbox-heartbeat"], "./dist/heartbeat-main.js");
      assert.ok(existsSync(path.join(repoRoot, "services/sandbox/src/heartbeat-main.ts")), "the entry point's source");

      const env = containerEnv(objects, heartbeat);
      const url = urlService(env.OZ0_ORCHESTRATOR_URL ?? "");
      const service = objects.find((o) => o.kind === "Service" && o.metadata.name === url?.service) as Any;
      assert.ok(service, `OZ0_ORCHESTRATOR_URL ${env.OZ0_ORCHESTRATOR_URL} names a Service`);
      assert.equal(service.spec.selector["app.kubernetes.io/name"], "orchestrator");
      assert.ok(
        service.spec.ports.some((p: Any) => p.port === url!.port),
        `the Service serves port ${url!.port}`,
      );
      assert.equal(url!.protocol, "http:");
      // The node API's own listener (OZ0_NODE_PORT), never the public API: the node token is refused there.
      const nodePort = Number(containerEnv(objects, orchestrator).OZ0_NODE_PORT);
      assert.equal(url!.port, nodePort, "heartbeats go to the orchestrator's node port");
      assert.notEqual(nodePort, Number(containerEnv(objects, orchestrator).OZ0_PORT));
      const servicePort = service.spec.ports.find((p: Any) => p.port === nodePort);
      assert.ok(
        orchestrator.ports.some((p: Any) => p.name === servicePort.targetPort && p.containerPort === nodePort),
        "the Service's node port reaches the container's",
      );

      // It asks the sandbox of its own pod, over loopback, at the port the sandbox listens on (on every address).
      const sandboxPort = sandbox.ports[0].containerPort;
      const sandboxEnv = containerEnv(objects, sandbox);
      assert.equal(Number(sandboxEnv.OZ0_PORT), sandboxPort);
      assert.equal(sandboxEnv.OZ0_HOST, "0.0.0.0", "the sandbox listens on loopback too");
      assert.equal(env.OZ0_SANDBOX_URL, `http://127.0.0.1:${sandboxPort}`);

      assert.deepEqual(envEntry(heartbeat, "OZ0_NODE_ID")?.valueFrom, { fieldRef: { fieldPath: "metadata.name" } });
      // Orchestrators call this very pod back (its sessions live here): its IP, the sandbox's port.
      const envNames = heartbeat.env.map((e: Any) => e.name);
      assert.deepEqual(envEntry(heartbeat, "POD_IP")?.valueFrom, { fieldRef: { fieldPath: "status.podIP" } });
      assert.equal(envEntry(heartbeat, "OZ0_ADVERTISE_URL")?.value, `http://$(POD_IP):${sandboxPort}`);
      assert.ok(
        envNames.indexOf("POD_IP") < envNames.indexOf("OZ0_ADVERTISE_URL"),
        "POD_IP is defined before $(POD_IP) is expanded",
      );
      // The sidecar serves nothing but its probes: no declared port, so no Service reaches it.
      assert.equal(heartbeat.ports, undefined);
      const healthPort = Number(env.OZ0_HEALTH_PORT);
      assert.deepEqual(heartbeat.livenessProbe?.httpGet, { path: "/livez", port: healthPort });
      assert.deepEqual(heartbeat.readinessProbe?.httpGet, { path: "/readyz", port: healthPort });
      assert.notEqual(healthPort, sandboxPort, "the sidecar's probe port is not the sandbox's, in the pod they share");
      // It holds the node token and nothing else: no service credential, no peer digest.
      const names = heartbeat.env.map((e: Any) => e.name);
      for (const name of names) assert.ok(!/^OZ0_SERVICE_TOKEN$|^OZ0_PEER_/.test(name), `node-heartbeat has ${name}`);
      assert.deepEqual((heartbeat.envFrom ?? []).length, 0, "node-heartbeat reads no ConfigMap or Secret wholesale");
    });

    void it("gives up on a silent node only after at least three missed heartbeats", () => {
      const heartbeatMs = Number(
        containerEnv(objects, container(workload(objects, "sandbox").pod, "node-heartbeat")).OZ0_HEARTBEAT_MS,
      );
      const staleMs = Number(
        containerEnv(objects, container(workload(objects, "orchestrator").pod, "orchestrator")).OZ0_NODE_STALE_AFTER_MS,
      );
      assert.ok(heartbeatMs > 0 && staleMs > 0, "both set explicitly");
      assert.ok(
        staleMs >= 3 * heartbeatMs,
        `OZ0_NODE_STALE_AFTER_MS ${staleMs} >= 3 × OZ0_HEARTBEAT_MS ${heartbeatMs}`,
      );
    });

    void it("runs several llm-proxy replicas on one PostgreSQL schema, with a database role of their own", () => {
      const { object, pod } = workload(objects, "llm-proxy");
      assert.ok((object as Any).spec.replicas >= 2);
      const c = container(pod, "llm-proxy");
      const db = envEntry(c, "DATABASE_URL")?.valueFrom?.secretKeyRef;
      assert.deepEqual(db, { name: "oz0-llm-proxy-postgres", key: "database-url" });
      // The proxy's schema holds encrypted provider keys: not the orchestrators' credentials.
      assert.notEqual(
        db.name,
        envEntry(container(workload(objects, "orchestrator").pod, "orchestrator"), "DATABASE_URL").valueFrom
          .secretKeyRef.name,
      );
      assert.equal(containerEnv(objects, c).OZ0_DATABASE_SCHEMA, "oz0_llm_proxy");
    });

    void it("gives every llm-proxy replica the same KEK and provider keys, as files from one Secret", () => {
      const { pod } = workload(objects, "llm-proxy");
      const c = container(pod, "llm-proxy");
      const env = containerEnv(objects, c);
      const keys = pod.volumes.find((v: Any) => v.secret);
      assert.ok(keys, "a Secret volume");
      const mount = c.volumeMounts.find((m: Any) => m.name === keys.name);
      // One Deployment's template: every replica mounts this very Secret, so every replica has this KEK.
      assert.equal(env.OZ0_KEK_FILE, `${mount.mountPath}/kek`);
      assert.equal(env.OZ0_SECRETS_DIR, mount.mountPath);
      assert.equal(env.OZ0_KEK, undefined);
      assert.ok(
        !(c.env ?? []).some((e: Any) => e.name === "OZ0_KEK"),
        "the KEK is a file, never an environment variable",
      );
    });

    void it("lets the orchestrators and the LLM proxies, and only them, reach PostgreSQL on 5432", () => {
      const reaches = (name: string): boolean =>
        policiesFor(objects, workload(objects, name).podLabels, "Egress").some((p) =>
          (p.spec.egress ?? []).some((r: Any) => r.ports.some((port: Any) => port.port === 5432)),
        );
      for (const w of workloads(objects)) {
        assert.equal(reaches(w.name), w.name === "orchestrator" || w.name === "llm-proxy", w.name);
      }
    });
  });
}

for (const dir of devOverlays) {
  void describe(`${path.basename(dir)}: one orchestrator on SQLite`, () => {
    void it("lists its sandbox in OZ0_SANDBOX_URLS, with no node registration, no heartbeat sidecar and no node token", () => {
      const objects = render(dir);
      const orchestrator = container(workload(objects, "orchestrator").pod, "orchestrator");
      const sandboxPod = workload(objects, "sandbox").pod;
      assert.equal(containerEnv(objects, orchestrator).OZ0_SANDBOX_URLS, "http://sandbox:7701");
      assert.equal(envEntry(orchestrator, "DATABASE_URL"), undefined);
      // Without PostgreSQL the orchestrator serves no SandboxNodeService: heartbeats would only be refused.
      assert.deepEqual(
        allContainers(sandboxPod).map((c: Any) => c.name),
        ["sandbox"],
        "no node-heartbeat sidecar",
      );
      for (const c of allContainers(sandboxPod))
        assert.equal(containerEnv(objects, c).OZ0_ORCHESTRATOR_URL, undefined, c.name);
      for (const c of [orchestrator, ...allContainers(sandboxPod)])
        assert.equal(envEntry(c, "OZ0_NODE_TOKEN"), undefined, c.name);
    });
  });
}
