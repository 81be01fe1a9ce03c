// The security and operability properties of every rendered overlay:
// key custody, non-root read-only containers, Pod Security, probes, graceful
// shutdown, ServiceAccounts, NetworkPolicies and the telemetry redaction.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { before, describe, it } from "node:test";
import { isDeepStrictEqual } from "node:util";
import { parse } from "yaml";
import { NODE_IDENTITY_AUDIENCE } from "@oz0/serving";
import {
  ingressWithoutFromFindings,
  NODE_PORT,
  publicApiFindings,
  sandboxToOrchestratorFindings,
} from "./support/identity-checks.js";
import { internetEgressFindings } from "./support/network-checks.js";
import { k8sDir, overlayDirs, preparedCopy, render, type K8sObject } from "./support/render.js";
import {
  allContainers,
  container,
  containerEnv,
  containerSecretRefs,
  declaredReplicas,
  matchesSelector,
  policiesFor,
  ports,
  secretRefs,
  services,
  type SecretRef,
  workload,
  workloads,
  type Any,
} from "./support/workloads.js";

const LEVELS = ["restricted", "baseline", "privileged"];

/**
 * The Pod Security level a pod template needs, for the fields these
 * manifests set (policy version 1.35+, "latest"): why it is not restricted
 * (or not baseline). restricted: seccomp RuntimeDefault or Localhost, no
 * Unconfined AppArmor, procMount Default, non-root, no privilege escalation,
 * capabilities dropped. baseline: no Unconfined seccomp or AppArmor, and
 * procMount Default unless the pod has its own user namespace
 * (hostUsers: false).
 */
function podSecurityLevel(pod: Any): { level: string; why: string[] } {
  const notRestricted: string[] = [];
  const notBaseline: string[] = [];
  const userNamespace = pod.hostUsers === false;
  for (const c of allContainers(pod)) {
    const sc = c.securityContext ?? {};
    const seccomp = (sc.seccompProfile ?? pod.securityContext?.seccompProfile)?.type;
    const appArmor = (sc.appArmorProfile ?? pod.securityContext?.appArmorProfile)?.type;
    if (seccomp === "Unconfined") notBaseline.push(`seccompProfile Unconfined (${c.name})`);
    else if (!["RuntimeDefault", "Localhost"].includes(seccomp))
      notRestricted.push(`seccompProfile ${String(seccomp)} (${c.name})`);
    if (appArmor === "Unconfined") notBaseline.push(`appArmorProfile Unconfined (${c.name})`);
    if ((sc.procMount ?? "Default") !== "Default")
      (userNamespace ? notRestricted : notBaseline).push(`procMount ${sc.procMount} (${c.name})`);
    if (sc.privileged === true) notBaseline.push(`privileged (${c.name})`);
    if ((sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot) !== true)
      notRestricted.push(`runAsNonRoot unset (${c.name})`);
    if (sc.allowPrivilegeEscalation !== false) notRestricted.push(`allowPrivilegeEscalation (${c.name})`);
    if (!sc.capabilities?.drop?.includes("ALL")) notRestricted.push(`capabilities not dropped (${c.name})`);
  }
  if (pod.hostNetwork || pod.hostPID || pod.hostIPC) notBaseline.push("host namespaces");
  if (notBaseline.length > 0) return { level: "privileged", why: [...notBaseline, ...notRestricted] };
  if (notRestricted.length > 0) return { level: "baseline", why: notRestricted };
  return { level: "restricted", why: [] };
}

/**
 * No pod holds a token the Kubernetes API takes. automountServiceAccountToken: false only stops the token the
 * admission controller would add; a projected serviceAccountToken volume is the same token written by hand (with no
 * audience, or the API server's, the API accepts it). The one projected token is the sandbox pods' for the
 * orchestrators' node API (audience NODE_IDENTITY_AUDIENCE, which the API server does not accept; identity.test.ts
 * checks that only node-heartbeat mounts it).
 */
export function apiTokenFindings(objects: K8sObject[]): string[] {
  const findings: string[] = [];
  for (const w of workloads(objects)) {
    for (const v of (w.pod.volumes ?? []) as Any[]) {
      for (const s of v.projected?.sources ?? []) {
        const token = s.serviceAccountToken;
        if (!token) continue;
        if (token.audience !== NODE_IDENTITY_AUDIENCE)
          findings.push(
            `${w.name}: volume ${v.name} projects a ServiceAccount token for ${token.audience ?? "the Kubernetes API"}`,
          );
        else if (w.name !== "sandbox") findings.push(`${w.name}: volume ${v.name} projects a node identity token`);
      }
    }
  }
  return findings;
}

const KEYS_SECRET = /^llm-proxy-keys(-[a-z0-9]+)?$/;
const NODE_TOKEN_SECRET = /^oz0-node-token(-[a-z0-9]+)?$/;
const NODE_FOR_SANDBOX_SECRET = /^oz0-node-for-sandbox-token(-[a-z0-9]+)?$/;
/** Each service's own credential (OZ0_SERVICE_TOKEN): a Secret per service (dev's carry a hash suffix). */
const serviceTokenSecret = (service: string): RegExp => new RegExp(`^oz0-${service}-token(-[a-z0-9]+)?$`);

interface Reader {
  workload: string;
  /** The one container of the pod that may read it; any container when unset. */
  container?: string;
  how: SecretRef["how"];
  env?: string;
}

/** Every Secret a pod may read, who reads it and how; anything else is a finding. */
const secretReaders: { secret: RegExp; readers: Reader[] }[] = [
  // The KEK, the providers file and the provider keys: files, in llm-proxy only.
  { secret: KEYS_SECRET, readers: [{ workload: "llm-proxy", how: "volume" }] },
  // Each service's own credential, in its own container only: receivers know it by its
  // digest (a ConfigMap), so no pod holds another service's token, and a node running
  // only sandbox pods is never sent the orchestrator's.
  ...services.map((service) => ({
    secret: serviceTokenSecret(service),
    readers: [{ workload: service, container: service, how: "env" as const, env: "OZ0_SERVICE_TOKEN" }],
  })),
  // What the orchestrator sends sandboxes alone: its container only, as the variable the orchestrator reads it from.
  {
    secret: serviceTokenSecret("orchestrator-for-sandbox"),
    readers: [
      { workload: "orchestrator", container: "orchestrator", how: "env", env: "OZ0_SERVICE_TOKEN_FOR_SANDBOX" },
    ],
  },
  // The events service's Kafka password, which Strimzi's User Operator writes for the KafkaUser oz0-events: a file
  // in events (kafka-auth.test.ts checks where it is mounted).
  { secret: /^oz0-events$/, readers: [{ workload: "events", how: "volume" }] },
  // PostgreSQL: the orchestrators' URL, and the proxies' own role (its schema holds encrypted keys).
  { secret: /^oz0-postgres$/, readers: [{ workload: "orchestrator", how: "env", env: "DATABASE_URL" }] },
  { secret: /^oz0-llm-proxy-postgres$/, readers: [{ workload: "llm-proxy", how: "env", env: "DATABASE_URL" }] },
  // Sandbox nodes present it in their heartbeats, the orchestrators check it. In a
  // sandbox pod only the node-heartbeat sidecar holds it, never the container
  // where harnesses run.
  {
    secret: NODE_TOKEN_SECRET,
    readers: [
      { workload: "orchestrator", how: "env", env: "OZ0_NODE_TOKEN" },
      { workload: "sandbox", container: "node-heartbeat", how: "env", env: "OZ0_NODE_TOKEN" },
    ],
  },
  // What the sidecar lists the sandbox's sessions with: the sandbox container knows only its digest.
  {
    secret: NODE_FOR_SANDBOX_SECRET,
    readers: [{ workload: "sandbox", container: "node-heartbeat", how: "env", env: "OZ0_NODE_TOKEN_FOR_SANDBOX" }],
  },
];

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`security of ${overlay}`, () => {
    let objects: K8sObject[] = [];
    let namespace: Any;
    before(() => {
      objects = render(dir);
      namespace = objects.find((o) => o.kind === "Namespace" && o.metadata.name === "oz0");
    });

    void it("lets each Secret be read only by its readers, the provider keys as files in llm-proxy only", () => {
      const readersOf = new Map<RegExp, string[]>();
      for (const w of workloads(objects)) {
        for (const ref of secretRefs(w.pod)) {
          const entry = secretReaders.find((e) => e.secret.test(ref.secret));
          assert.ok(entry, `${w.name} reads Secret ${ref.secret}, which no pod should`);
          const allowed = entry.readers.some(
            (r) =>
              r.workload === w.name &&
              r.how === ref.how &&
              (r.env === undefined || r.env === ref.env) &&
              (r.container === undefined || r.container === ref.container),
          );
          assert.ok(
            allowed,
            `${w.name}${ref.container ? `/${ref.container}` : ""} reads Secret ${ref.secret} (${ref.how}${ref.env ? ` as ${ref.env}` : ""})`,
          );
          readersOf.set(entry.secret, [...(readersOf.get(entry.secret) ?? []), w.name]);
        }
        assert.ok(!(w.pod.volumes ?? []).some((v: Any) => v.hostPath), `${w.name} mounts a hostPath`);
      }
      assert.deepEqual(readersOf.get(KEYS_SECRET), ["llm-proxy"]);
      for (const service of services) {
        const entry = secretReaders.find((e) => e.secret.source === serviceTokenSecret(service).source)!;
        assert.deepEqual(
          readersOf.get(entry.secret),
          [service],
          `${service}'s token is read by ${service}, and only by it`,
        );
      }
      const forSandbox = secretReaders.find(
        (e) => e.secret.source === serviceTokenSecret("orchestrator-for-sandbox").source,
      )!;
      assert.deepEqual(readersOf.get(forSandbox.secret), ["orchestrator"], "the credential for sandboxes");
      const proxy = workload(objects, "llm-proxy");
      const mount = container(proxy.pod, "llm-proxy").volumeMounts.find((m: Any) => m.name === "provider-keys");
      assert.equal(mount.readOnly, true);
      const env = containerEnv(objects, container(proxy.pod, "llm-proxy"));
      assert.ok(env.OZ0_KEK_FILE?.startsWith(`${mount.mountPath}/`), "OZ0_KEK_FILE points into the Secret mount");
      assert.ok(
        env.OZ0_PROVIDERS_FILE?.startsWith(`${mount.mountPath}/`),
        "OZ0_PROVIDERS_FILE points into the Secret mount",
      );
      assert.equal(env.OZ0_SECRETS_DIR, mount.mountPath, "provider keys are read from the Secret mount");
      assert.equal(env.OZ0_KEK, undefined, "no KEK in the environment");
    });

    void it("lets only orchestrator and sandbox pods read the node token, both or neither, and in sandbox pods only the node-heartbeat container", () => {
      const readers = workloads(objects)
        .filter((w) => secretRefs(w.pod).some((r) => NODE_TOKEN_SECRET.test(r.secret)))
        .map((w) => w.name)
        .sort();
      assert.ok(
        readers.length === 0 || (readers.length === 2 && readers[0] === "orchestrator" && readers[1] === "sandbox"),
        readers.join(", "),
      );
      const sandbox = workload(objects, "sandbox");
      // Sandbox pods run untrusted code: the node tokens and the sandbox's own credential are the only Secrets they can read.
      const sandboxSecrets = secretRefs(sandbox.pod).map((r) => r.secret);
      assert.ok(
        sandboxSecrets.every(
          (name) =>
            NODE_TOKEN_SECRET.test(name) ||
            NODE_FOR_SANDBOX_SECRET.test(name) ||
            serviceTokenSecret("sandbox").test(name),
        ),
        sandboxSecrets.join(", "),
      );
      for (const w of workloads(objects)) {
        for (const c of allContainers(w.pod)) {
          assert.ok(
            !(c.env ?? []).some((e: Any) => e.name === "OZ0_NODE_TOKEN" && e.value !== undefined),
            `${w.name}/${c.name}: the node token is a literal`,
          );
        }
      }

      // Harnesses run in the sandbox container, with OZ0_ISOLATION=none as its own
      // user (they can read its processes' /proc/<pid>/environ): no Secret there by
      // any route (env, envFrom, mounted volume) but the sandbox's own credential
      // (which lets it publish events, nothing more), no node token, no orchestrator
      // to send heartbeats to.
      const runner = container(sandbox.pod, "sandbox");
      const runnerReads = containerSecretRefs(sandbox.pod, runner).map(
        (r) => `${r.secret.replace(/-[a-z0-9]{10}$/, "")} (${r.how} ${r.env ?? ""})`,
      );
      assert.deepEqual(
        runnerReads,
        ["oz0-sandbox-token (env OZ0_SERVICE_TOKEN)"],
        "the sandbox container reads its own credential and no other Secret",
      );
      const runnerEnvNames = [
        ...(runner.env ?? []).map((e: Any) => e.name),
        ...Object.keys(containerEnv(objects, runner)),
      ];
      for (const name of ["OZ0_NODE_TOKEN", "OZ0_ORCHESTRATOR_URL"])
        assert.ok(!runnerEnvNames.includes(name), `the sandbox container has ${name}`);
      // One PID namespace per container: the sandbox container cannot see the sidecar's processes, nor their environ.
      assert.ok(
        [undefined, false].includes(sandbox.pod.shareProcessNamespace),
        `shareProcessNamespace: ${sandbox.pod.shareProcessNamespace}`,
      );
      assert.notEqual(sandbox.pod.hostPID, true);

      if (readers.includes("sandbox")) {
        const holders = allContainers(sandbox.pod).filter((c: Any) =>
          containerSecretRefs(sandbox.pod, c).some((r) => NODE_TOKEN_SECRET.test(r.secret)),
        );
        assert.deepEqual(
          holders.map((c: Any) => c.name),
          ["node-heartbeat"],
          "only the heartbeat sidecar holds the node token",
        );
        // And it lists the sandbox's sessions with a credential of its own, which the sandbox knows by its digest.
        const sidecarEnv = container(sandbox.pod, "node-heartbeat").env ?? [];
        assert.ok(
          sidecarEnv.some((e: Any) => e.name === "OZ0_NODE_TOKEN_FOR_SANDBOX"),
          "the node-heartbeat container has OZ0_NODE_TOKEN_FOR_SANDBOX: without it the sandbox is sent the node token",
        );
        const digest = (runner.env ?? []).find((e: Any) => e.name === "OZ0_NODE_TOKEN_SHA256");
        assert.equal(digest?.valueFrom?.configMapKeyRef?.key, "node-for-sandbox", "the sandbox knows the sidecar's");
        const sidecar = container(sandbox.pod, "node-heartbeat");
        // Defence in depth: another uid and gid than the container that runs harnesses.
        const idOf = (c: Any, field: "runAsUser" | "runAsGroup"): unknown =>
          c.securityContext?.[field] ?? sandbox.pod.securityContext?.[field];
        for (const field of ["runAsUser", "runAsGroup"] as const) {
          assert.equal(typeof idOf(sidecar, field), "number", `node-heartbeat ${field}`);
          assert.equal(typeof idOf(runner, field), "number", `sandbox ${field}`);
          assert.notEqual(
            idOf(sidecar, field),
            idOf(runner, field),
            `node-heartbeat and sandbox share ${field} ${String(idOf(runner, field))}`,
          );
        }
        // And no volume in common, so nothing one writes is read by the other.
        const mounted = (c: Any): string[] => (c.volumeMounts ?? []).map((m: Any) => m.name);
        const shared = mounted(sidecar).filter((v) => mounted(runner).includes(v));
        assert.deepEqual(shared, [], "volumes the sidecar shares with the sandbox container");
      } else {
        assert.ok(
          !allContainers(sandbox.pod).some((c: Any) => c.name === "node-heartbeat"),
          "a heartbeat sidecar without the node token",
        );
      }
    });

    void it("runs every container non-root, read-only, without privilege or capabilities", () => {
      for (const w of workloads(objects)) {
        const podSc = w.pod.securityContext ?? {};
        assert.ok(!w.pod.hostNetwork && !w.pod.hostPID && !w.pod.hostIPC, `${w.name} shares a host namespace`);
        for (const c of allContainers(w.pod)) {
          const sc = c.securityContext ?? {};
          const where = `${w.name}/${c.name}`;
          assert.equal(sc.runAsNonRoot ?? podSc.runAsNonRoot, true, `${where} runAsNonRoot`);
          const uid = sc.runAsUser ?? podSc.runAsUser;
          assert.ok(typeof uid === "number" && uid > 0, `${where} runs as a numeric non-root uid`);
          assert.equal(sc.readOnlyRootFilesystem, true, `${where} readOnlyRootFilesystem`);
          assert.equal(sc.allowPrivilegeEscalation, false, `${where} allowPrivilegeEscalation`);
          assert.notEqual(sc.privileged, true, `${where} privileged`);
          assert.ok(sc.capabilities?.drop?.includes("ALL"), `${where} drops ALL capabilities`);
          assert.deepEqual(sc.capabilities?.add ?? [], [], `${where} adds capabilities`);
          // Writable paths are volumes: /tmp at least.
          assert.ok(
            (c.volumeMounts ?? []).some((m: Any) => m.mountPath === "/tmp"),
            `${where} has a /tmp volume`,
          );
        }
      }
    });

    void it("admits every pod at the namespace's Pod Security enforce level, and lowers it only for the bubblewrap sandbox", () => {
      const enforce = namespace.metadata.labels["pod-security.kubernetes.io/enforce"];
      assert.equal(namespace.metadata.labels["pod-security.kubernetes.io/warn"], "restricted");
      assert.equal(namespace.metadata.labels["pod-security.kubernetes.io/audit"], "restricted");
      const bubblewrap = workload(objects, "sandbox").pod.hostUsers === false;
      // Only the bubblewrap variant lowers enforcement; everything else stays restricted.
      assert.equal(enforce, bubblewrap ? "privileged" : "restricted");
      for (const w of workloads(objects)) {
        const { level, why } = podSecurityLevel(w.pod);
        assert.ok(
          LEVELS.indexOf(level) <= LEVELS.indexOf(enforce),
          `${w.name} needs Pod Security ${level} (${why.join("; ")}), the namespace enforces ${enforce}`,
        );
        if (w.name !== "sandbox") assert.equal(level, "restricted", `${w.name}: ${why.join("; ")}`);
      }
      if (bubblewrap) {
        const env = containerEnv(objects, container(workload(objects, "sandbox").pod, "sandbox"));
        assert.equal(env.OZ0_ISOLATION, "bwrap");
        // What deploy/k8s/README.md states: refused at restricted and at baseline (the Unconfined
        // profiles; with hostUsers: false baseline no longer minds procMount Unmasked), so privileged.
        const { level, why } = podSecurityLevel(workload(objects, "sandbox").pod);
        assert.equal(level, "privileged");
        assert.deepEqual(why.sort(), [
          "appArmorProfile Unconfined (sandbox)",
          "procMount Unmasked (sandbox)",
          "seccompProfile Unconfined (sandbox)",
        ]);
      }
    });

    void it("gives every container a liveness and a readiness probe", () => {
      for (const w of workloads(objects)) {
        for (const c of [
          ...(w.pod.initContainers ?? []).filter((i: Any) => i.restartPolicy === "Always"),
          ...w.pod.containers,
        ]) {
          for (const probe of ["livenessProbe", "readinessProbe"]) {
            const p = c[probe];
            assert.ok(p && (p.grpc || p.httpGet || p.tcpSocket || p.exec), `${w.name}/${c.name} has no ${probe}`);
          }
        }
      }
    });

    void it("probes every service with native gRPC health checks on numeric ports", () => {
      for (const name of services) {
        const c = container(workload(objects, name).pod, name);
        const port = ports[name];
        assert.equal(c.ports[0].containerPort, port);
        for (const [probe, service] of [
          ["livenessProbe", "liveness"],
          ["readinessProbe", "readiness"],
          ["startupProbe", "liveness"],
        ] as const) {
          assert.deepEqual(c[probe]?.grpc, { port, service }, `${name} ${probe}`);
        }
      }
      for (const w of workloads(objects)) {
        for (const c of allContainers(w.pod)) {
          for (const probe of ["livenessProbe", "readinessProbe", "startupProbe"]) {
            const p = c[probe];
            if (!p) continue;
            const port = p.grpc?.port ?? p.httpGet?.port ?? p.tcpSocket?.port;
            assert.equal(typeof port, "number", `${w.name}/${c.name} ${probe} port is numeric`);
          }
        }
      }
    });

    void it("gives every service its preStop drain plus shutdown grace before SIGKILL", () => {
      // The services' close() grace (lib/serving default 5 s); the sandbox
      // first cancels its sessions with OZ0_CANCEL_GRACE_MS.
      const cancelMs = Number(
        containerEnv(objects, container(workload(objects, "sandbox").pod, "sandbox")).OZ0_CANCEL_GRACE_MS,
      );
      assert.ok(cancelMs > 0, "OZ0_CANCEL_GRACE_MS is set, so the grace below is known");
      const grace: Record<string, number> = {
        orchestrator: 5,
        sandbox: 5 + cancelMs / 1000,
        "llm-proxy": 5,
        events: 5,
      };
      for (const name of services) {
        const { pod } = workload(objects, name);
        const preStop = container(pod, name).lifecycle?.preStop?.sleep?.seconds ?? 0;
        assert.ok(preStop > 0, `${name} sleeps in preStop so endpoints drop it first`);
        assert.ok(
          pod.terminationGracePeriodSeconds >= preStop + grace[name]! + 5,
          `${name} terminationGracePeriodSeconds`,
        );
      }
      assert.ok(workload(objects, "sandbox").pod.terminationGracePeriodSeconds >= 25);
    });

    void it("gives each workload its own ServiceAccount without an API token, and no RBAC over Secrets", () => {
      const used = new Set<string>();
      for (const w of workloads(objects)) {
        const sa = w.pod.serviceAccountName;
        assert.ok(sa && sa !== "default", `${w.name} has its own ServiceAccount`);
        assert.ok(!used.has(sa), `${sa} shared`);
        used.add(sa);
        assert.equal(w.pod.automountServiceAccountToken, false, `${w.name} automountServiceAccountToken`);
        const account = objects.find((o) => o.kind === "ServiceAccount" && o.metadata.name === sa) as Any;
        assert.ok(account, `ServiceAccount ${sa} exists`);
        assert.equal(account.automountServiceAccountToken, false, `ServiceAccount ${sa} automount`);
      }
      assert.deepEqual(apiTokenFindings(objects), [], "no token the API takes, projected by hand");
      for (const role of objects.filter((o) => o.kind === "Role" || o.kind === "ClusterRole") as Any[]) {
        for (const rule of role.rules ?? []) {
          const r: string[] = rule.resources ?? [];
          assert.ok(!r.includes("secrets") && !r.includes("*"), `${role.kind}/${role.metadata.name} grants secrets`);
        }
      }
    });

    void it("denies all traffic by default and lets only llm-proxy leave the cluster, on 443", () => {
      const deny = objects.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === "default-deny-all") as Any;
      assert.ok(deny);
      assert.deepEqual(deny.spec.podSelector, {});
      assert.deepEqual([...deny.spec.policyTypes].sort(), ["Egress", "Ingress"]);
      assert.equal(deny.spec.egress, undefined);
      assert.equal(deny.spec.ingress, undefined);
      for (const policy of objects.filter((o) => o.kind === "NetworkPolicy") as Any[]) {
        for (const rule of policy.spec.egress ?? []) {
          const where = `NetworkPolicy ${policy.metadata.name}`;
          assert.ok((rule.to ?? []).length > 0, `${where}: an egress rule without "to" allows every destination`);
          assert.ok((rule.ports ?? []).length > 0, `${where}: an egress rule without ports`);
        }
      }
      // Only llm-proxy leaves, on 443, and not to private or link-local ranges (the Strimzi entity operator
      // reaches the API server).
      assert.deepEqual(internetEgressFindings(objects), []);
    });

    void it("lets sandbox pods reach only the orchestrator, the LLM proxy and the telemetry sinks: no DNS", () => {
      const sandbox = workload(objects, "sandbox");
      const strict = !objects.some((o) => o.kind === "NetworkPolicy" && o.metadata.name === "sandbox-telemetry");
      // Never events: the sandbox publishes nothing (network.test.ts checks both ends).
      const allowed = new Set(["orchestrator", "llm-proxy", ...(strict ? [] : ["otel-collector"])]);
      const reached = new Set<string>();
      for (const policy of policiesFor(objects, sandbox.podLabels, "Egress")) {
        for (const rule of policy.spec.egress ?? []) {
          for (const peer of rule.to) {
            assert.equal(peer.ipBlock, undefined, `${policy.metadata.name}: sandbox egress to an ipBlock`);
            // The cluster's resolver recurses: a query for <data>.attacker.example leaves the cluster.
            assert.ok(
              !rule.ports.some((p: Any) => p.port === 53),
              `${policy.metadata.name}: sandbox pods may not reach a resolver (port 53)`,
            );
            assert.equal(
              peer.namespaceSelector,
              undefined,
              `${policy.metadata.name}: sandbox egress to another namespace`,
            );
            const target = peer.podSelector?.matchLabels?.["app.kubernetes.io/name"];
            assert.ok(
              allowed.has(target),
              `${policy.metadata.name}: sandbox may not reach ${target ?? JSON.stringify(peer)}`,
            );
            if (target === "orchestrator")
              assert.deepEqual(
                rule.ports,
                [{ protocol: "TCP", port: NODE_PORT }],
                `${policy.metadata.name}: sandbox reaches the orchestrator's node API only`,
              );
            reached.add(target);
          }
        }
      }
      assert.ok(reached.has("orchestrator") && reached.has("llm-proxy"));
      // And nothing but the orchestrator calls the sandbox.
      for (const policy of policiesFor(objects, sandbox.podLabels, "Ingress")) {
        for (const rule of policy.spec.ingress ?? []) {
          assert.deepEqual(rule.from, [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "orchestrator" } } }]);
        }
      }
    });

    void it("has sandbox pods resolve no names, and name every peer by an address Kubernetes gives them", () => {
      const sandbox = workload(objects, "sandbox");
      assert.equal(sandbox.pod.dnsPolicy, "None", "not the cluster's resolver");
      assert.deepEqual(sandbox.pod.dnsConfig, { nameservers: ["127.0.0.1"] }, "a nameserver that answers nothing");
      assert.equal(sandbox.pod.enableServiceLinks, true, "the *_SERVICE_HOST variables its URLs use");
      for (const c of allContainers(sandbox.pod)) {
        for (const [key, value] of Object.entries(containerEnv(objects, c))) {
          for (const match of value.matchAll(/^[a-z]+:\/\/([^/:]+)/g)) {
            assert.match(
              match[1]!,
              /^(127\.0\.0\.1|\$\([A-Z_]+_SERVICE_HOST\)|\$\(POD_IP\))$/,
              `${c.name} ${key}=${value}: a host the pod would have to resolve`,
            );
          }
        }
      }
      // The proxy's public URL is what harnesses in sandbox pods call.
      const proxy = workload(objects, "llm-proxy");
      const proxyEnv = containerEnv(objects, container(proxy.pod, "llm-proxy"));
      assert.equal(proxyEnv.OZ0_PUBLIC_URL, "http://$(LLM_PROXY_SERVICE_HOST):7702");
      assert.equal(proxy.pod.enableServiceLinks, true);
    });

    void it("has no ingress rule without `from`", () => {
      assert.deepEqual(ingressWithoutFromFindings(objects), []);
    });

    void it("lets only the named clients reach the orchestrator's public API (7700), and no pod of its own namespace", () => {
      assert.deepEqual(publicApiFindings(objects), []);
      // Which is why no rendered namespace or pod of ours carries the client label.
      for (const o of objects)
        assert.equal(
          o.metadata.labels?.["oz0.dev/client"],
          undefined,
          `${o.kind}/${o.metadata.name} is labelled a client`,
        );
      for (const w of workloads(objects))
        assert.equal(w.podLabels["oz0.dev/client"], undefined, `${w.name} pods are labelled clients`);
    });

    void it("lets sandbox pods reach the orchestrator on its node port (7710) only, at both ends, and the orchestrator reach every sandbox pod on 7701", () => {
      assert.deepEqual(sandboxToOrchestratorFindings(objects), []);
      const orchestrator = workload(objects, "orchestrator");
      const orchestratorPorts = allContainers(orchestrator.pod).flatMap((c: Any) =>
        (c.ports ?? []).map((p: Any) => p.containerPort as number),
      );
      assert.deepEqual(orchestratorPorts.sort(), [ports.orchestrator, NODE_PORT]);
      const egress = policiesFor(objects, orchestrator.podLabels, "Egress").flatMap((p) => p.spec.egress ?? []);
      // The sandbox's podSelector covers every node's pod IP, the address it advertises.
      const sandboxPeer = { podSelector: { matchLabels: { "app.kubernetes.io/name": "sandbox" } } };
      assert.ok(
        egress.some((r: Any) => isDeepStrictEqual(r.to, [sandboxPeer]) && r.ports.some((p: Any) => p.port === 7701)),
      );
    });

    void it("lets only the orchestrator and the sandbox call the LLM proxy", () => {
      for (const policy of policiesFor(objects, workload(objects, "llm-proxy").podLabels, "Ingress")) {
        for (const rule of policy.spec.ingress ?? []) {
          const from = (rule.from ?? []).map((p: Any) => p.podSelector?.matchLabels?.["app.kubernetes.io/name"]).sort();
          assert.deepEqual(from, ["orchestrator", "sandbox"]);
        }
      }
    });

    void it("points every service at the collector, whose pipelines drop model content", () => {
      for (const name of services) {
        const env = containerEnv(objects, container(workload(objects, name).pod, name));
        // Sandbox pods resolve no names: they reach the collector at its Service's address.
        const collector = name === "sandbox" ? "$(OTEL_COLLECTOR_SERVICE_HOST)" : "otel-collector";
        assert.equal(env.OTEL_EXPORTER_OTLP_ENDPOINT, `http://${collector}:4318`, name);
        assert.equal(env.OZ0_HOST, "0.0.0.0", `${name} listens on the pod's address`);
        assert.equal(Number(env.OZ0_PORT), ports[name], `${name} OZ0_PORT`);
      }
      const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name.startsWith("otel-collector")) as Any;
      const config = parse(cm.data["config.yaml"]);
      const dropped = [
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
      ];
      for (const pipeline of ["traces", "logs"]) {
        const names: string[] = config.service.pipelines[pipeline].processors;
        assert.deepEqual(config.service.pipelines[pipeline].receivers, ["otlp"]);
        assert.equal(names.at(-1), "batch");
        const attributes = names
          .filter((n) => n.split("/")[0] === "attributes")
          .flatMap((n) => config.processors[n].actions);
        const transforms = names.filter((n) => n.split("/")[0] === "transform").map((n) => config.processors[n]);
        for (const key of dropped) {
          assert.ok(
            attributes.some((a: Any) => a.key === key && a.action === "delete"),
            `${pipeline}: attributes processor deletes ${key}`,
          );
          const contexts = pipeline === "traces" ? ["span", "spanevent"] : ["log"];
          for (const context of contexts) {
            const statements: string[] = transforms.flatMap((t) =>
              (t[`${pipeline === "traces" ? "trace" : "log"}_statements`] ?? [])
                .filter((s: Any) => s.context === context)
                .flatMap((s: Any) => s.statements),
            );
            const deletes = statements.some((s) => {
              const m = /^delete_matching_keys\(attributes, "(.*)"\)$/.exec(s);
              return m && new RegExp(JSON.parse(`"${m[1]}"`) as string).test(key); // OTTL unescapes its string literal like JSON
            });
            assert.ok(deletes, `${pipeline}/${context}: a transform deletes ${key}`);
          }
        }
      }
      for (const name of Object.keys(config.receivers)) assert.equal(name, "otlp");
    });
  });
}

void describe("dev overlay: embedded defaults", () => {
  let objects: K8sObject[] = [];
  before(() => {
    objects = render(path.join(overlayDirs().find((d) => path.basename(d) === "dev")!));
  });

  void it("runs one replica of each service, with no Kafka and no PostgreSQL", () => {
    for (const w of workloads(objects)) assert.equal((w.object as Any).spec.replicas, 1, w.name);
    assert.equal(containerEnv(objects, workload(objects, "events").pod.containers[0]).KAFKA_BROKERS, undefined);
    const orchestrator = workload(objects, "orchestrator").pod.containers[0];
    assert.ok(!(orchestrator.env ?? []).some((e: Any) => e.name === "DATABASE_URL"));
    assert.ok(!objects.some((o) => o.apiVersion.startsWith("kafka.strimzi.io/")));
    assert.ok(!objects.some((o) => o.kind === "HorizontalPodAutoscaler"));
  });

  void it("generates a throwaway llm-proxy-keys Secret with a 32-byte KEK", () => {
    const secret = objects.find((o) => o.kind === "Secret" && KEYS_SECRET.test(o.metadata.name)) as Any;
    assert.ok(secret);
    const kek = Buffer.from(
      Buffer.from(secret.data.kek.replace(/\s/g, ""), "base64").toString("utf8").trim(),
      "base64",
    );
    assert.equal(kek.length, 32);
    JSON.parse(Buffer.from(secret.data["providers.json"].replace(/\s/g, ""), "base64").toString("utf8"));
  });
});

void describe("prod overlay: scale and infrastructure", () => {
  let objects: K8sObject[] = [];
  before(() => {
    objects = render(path.join(overlayDirs().find((d) => path.basename(d) === "prod")!));
  });

  void it("sets requests and limits on every container and spreads the pods of every replicated service over nodes and zones", () => {
    for (const w of workloads(objects)) {
      for (const c of allContainers(w.pod)) {
        assert.ok(c.resources?.requests?.cpu && c.resources?.requests?.memory, `${w.name} requests`);
        assert.ok(c.resources?.limits?.memory, `${w.name} memory limit`);
      }
      if (w.name === "events") {
        // One replica (events.test.ts): nothing to spread; its claim keeps it in its volume's zone.
        assert.equal(declaredReplicas(w), 1);
        assert.equal(w.pod.topologySpreadConstraints, undefined, "events: a spread for one pod");
        continue;
      }
      assert.ok(declaredReplicas(w) >= 2, `${w.name} runs several replicas`);
      const keys = (w.pod.topologySpreadConstraints ?? []).map((t: Any) => t.topologyKey).sort();
      assert.deepEqual(keys, ["kubernetes.io/hostname", "topology.kubernetes.io/zone"], w.name);
      for (const t of w.pod.topologySpreadConstraints)
        assert.ok(matchesSelector(t.labelSelector, w.podLabels), `${w.name} spread selects its own pods`);
    }
  });

  void it("autoscales the orchestrator, sandbox and llm-proxy from at least two replicas, and not events", () => {
    const hpas = objects.filter((o) => o.kind === "HorizontalPodAutoscaler") as Any[];
    // events runs exactly one replica (events.test.ts checks every overlay).
    assert.deepEqual(hpas.map((h) => h.spec.scaleTargetRef.name).sort(), ["llm-proxy", "orchestrator", "sandbox"]);
    for (const hpa of hpas) {
      const scaled = workload(objects, hpa.spec.scaleTargetRef.name);
      assert.equal(hpa.spec.scaleTargetRef.kind, scaled.kind, `${hpa.metadata.name} targets the workload's kind`);
      const target = scaled.object as Any;
      assert.ok(hpa.spec.minReplicas >= 2 && hpa.spec.maxReplicas > hpa.spec.minReplicas);
      assert.ok(target.spec.replicas >= hpa.spec.minReplicas, `${hpa.metadata.name} starts at minReplicas`);
      // Utilisation is over the pod's containers' summed requests: one without a CPU request leaves the HPA without a metric.
      for (const c of target.spec.template.spec.containers)
        assert.ok(c.resources?.requests?.cpu, `${hpa.metadata.name}: CPU utilisation needs a CPU request on ${c.name}`);
    }
  });

  void it("claims no volume but the shared OZ0_HOME and the events outbox: the other stores are in PostgreSQL", () => {
    const claims = objects.filter((o) => o.kind === "PersistentVolumeClaim").map((o) => o.metadata.name);
    assert.deepEqual(claims, ["oz0-home"]);
    const perPod = workloads(objects).flatMap((w) => w.claimTemplates.map((t: Any) => `${w.name}/${t.metadata.name}`));
    assert.deepEqual(perPod, ["events/data"], "claims per pod: only the events outbox");
    const proxy = workload(objects, "llm-proxy");
    assert.deepEqual(
      (proxy.object as Any).spec.strategy.type,
      "RollingUpdate",
      "replicas replace each other with overlap",
    );
  });

  void it("wires events to Strimzi's Kafka and the lifecycle topic, in KRaft mode", () => {
    const kafka = objects.find((o) => o.kind === "Kafka") as Any;
    const pool = objects.find((o) => o.kind === "KafkaNodePool") as Any;
    const topic = objects.find((o) => o.kind === "KafkaTopic") as Any;
    for (const o of [kafka, pool, topic]) assert.equal(o.apiVersion, "kafka.strimzi.io/v1");
    assert.equal(pool.metadata.labels["strimzi.io/cluster"], kafka.metadata.name);
    assert.deepEqual([...pool.spec.roles].sort(), ["broker", "controller"]);
    assert.equal(kafka.spec.zookeeper, undefined);
    assert.equal(topic.metadata.labels["strimzi.io/cluster"], kafka.metadata.name);
    const env = containerEnv(objects, workload(objects, "events").pod.containers[0]);
    assert.equal(env.OZ0_KAFKA_TOPIC, topic.spec.topicName ?? topic.metadata.name);
    assert.equal(env.OZ0_KAFKA_TOPIC, "oz0.lifecycle.v1");
    const listener = kafka.spec.kafka.listeners.find((l: Any) => !l.tls);
    assert.equal(env.KAFKA_BROKERS, `${kafka.metadata.name}-kafka-bootstrap:${listener.port}`);
    // events may reach the brokers on that port
    const egress = policiesFor(objects, workload(objects, "events").podLabels, "Egress").flatMap(
      (p) => p.spec.egress ?? [],
    );
    assert.ok(
      egress.some(
        (r: Any) =>
          r.ports.some((p: Any) => p.port === listener.port) &&
          r.to.some((t: Any) => t.podSelector?.matchLabels?.["strimzi.io/cluster"] === kafka.metadata.name),
      ),
    );
  });
});

void describe("prod-gvisor and prod-kata: sandbox runtime classes", () => {
  void it("sets the runtime class on the sandbox only, and keeps it restricted", () => {
    for (const [name, runtime] of [
      ["prod-gvisor", "gvisor"],
      ["prod-kata", "kata"],
    ] as const) {
      const objects = render(overlayDirs().find((d) => path.basename(d) === name)!);
      for (const w of workloads(objects))
        assert.equal(w.pod.runtimeClassName, w.name === "sandbox" ? runtime : undefined, `${name} ${w.name}`);
      const ns = objects.find((o) => o.kind === "Namespace")!;
      assert.equal(ns.metadata.labels!["pod-security.kubernetes.io/enforce"], "restricted");
    }
  });
});

void describe("the sandbox-node-pool component", () => {
  // The pool keeps the sandbox and every other workload on different nodes: a ReadWriteOnce claim mounted on both
  // sides (dev's OZ0_HOME, which kind's and k3d's local-path pin to one node) leaves one of them Pending for good.
  void it("is offered only over overlays whose claims can be mounted on both sides of the pool", () => {
    const readme = readFileSync(path.join(k8sDir, "README.md"), "utf8");
    const section = readme.slice(
      readme.indexOf("**Sandbox nodes of their own**"),
      readme.indexOf("## Dev on a local cluster"),
    );
    for (const overlay of ["prod", "prod-gvisor", "prod-kata", "dev", "dev-bubblewrap"]) {
      const dir = path.join(preparedCopy(), "overlays", `${overlay}-with-pool-claims`);
      mkdirSync(dir);
      writeFileSync(
        path.join(dir, "kustomization.yaml"),
        `resources: [../${overlay}]\ncomponents: [../../components/sandbox-node-pool]\n`,
      );
      const objects = render(dir);
      const once = new Set(
        objects
          .filter((o) => o.kind === "PersistentVolumeClaim")
          .filter((o) =>
            ((o as { spec?: { accessModes?: string[] } }).spec?.accessModes ?? []).some(
              (m) => m !== "ReadWriteMany" && m !== "ReadOnlyMany",
            ),
          )
          .map((o) => o.metadata.name),
      );
      const claims = (w: ReturnType<typeof workloads>[number]): string[] =>
        ((w.pod.volumes ?? []) as { persistentVolumeClaim?: { claimName: string } }[])
          .map((v) => v.persistentVolumeClaim?.claimName)
          .filter((c): c is string => c !== undefined && once.has(c));
      const all = workloads(objects);
      const inPool = new Set(all.filter((w) => w.name === "sandbox").flatMap(claims));
      const across = all
        .filter((w) => w.name !== "sandbox")
        .flatMap(claims)
        .filter((c) => inPool.has(c));
      if (across.length > 0)
        assert.ok(
          new RegExp(`not with [^.:]*\`${overlay}\``).test(section),
          `${overlay}: the claim ${across[0]} is ReadWriteOnce and mounted in and off the pool, and the README offers the component there`,
        );
    }
  });

  // Strimzi's pods are made by its operator from the custom resources' templates, not from a workload of ours: the
  // taint alone kept them off the pool (deploy review), so a node missing it could run a broker beside agents' code.
  void it("keeps Kafka's brokers and entity operator off the pool's nodes by affinity too", () => {
    const dir = path.join(preparedCopy(), "overlays", "prod-with-node-pool-kafka");
    mkdirSync(dir);
    writeFileSync(
      path.join(dir, "kustomization.yaml"),
      "resources: [../prod]\ncomponents: [../../components/sandbox-node-pool]\n",
    );
    const objects = render(dir) as Any[];
    const refused = [{ matchExpressions: [{ key: "oz0.dev/pool", operator: "NotIn", values: ["sandbox"] }] }];
    const terms = (pod: Any) =>
      pod?.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
    const pools = objects.filter((o) => o.kind === "KafkaNodePool");
    const clusters = objects.filter((o) => o.kind === "Kafka");
    assert.ok(pools.length > 0 && clusters.length > 0, "prod runs Kafka through Strimzi");
    for (const pool of pools)
      assert.deepEqual(terms(pool.spec?.template?.pod), refused, `KafkaNodePool/${pool.metadata.name}`);
    for (const kafka of clusters)
      assert.deepEqual(terms(kafka.spec?.entityOperator?.template?.pod), refused, `Kafka/${kafka.metadata.name}`);
  });

  void it("puts sandbox pods on the pool's nodes alone and keeps every other workload off them", () => {
    for (const overlay of ["prod", "dev-bubblewrap"]) {
      // An overlay of the component over a shipped one, beside them in a prepared copy (kustomize takes no absolute paths).
      const dir = path.join(preparedCopy(), "overlays", `${overlay}-with-node-pool`);
      mkdirSync(dir);
      writeFileSync(
        path.join(dir, "kustomization.yaml"),
        `resources: [../${overlay}]\ncomponents: [../../components/sandbox-node-pool]\n`,
      );
      const all = workloads(render(dir));
      assert.ok(all.length >= 5, `${overlay}: ${all.map((w) => w.name).join(", ")}`);
      for (const w of all) {
        const refused = w.pod.affinity?.nodeAffinity?.requiredDuringSchedulingIgnoredDuringExecution?.nodeSelectorTerms;
        if (w.name === "sandbox") {
          assert.deepEqual(w.pod.nodeSelector, { "oz0.dev/pool": "sandbox" }, overlay);
          assert.deepEqual(w.pod.tolerations, [
            { key: "oz0.dev/pool", operator: "Equal", value: "sandbox", effect: "NoSchedule" },
          ]);
          assert.equal(refused, undefined);
          // The README's commands prepare nodes these pods go to, and tolerate.
          const readme = readFileSync(path.join(k8sDir, "README.md"), "utf8");
          const [toleration] = w.pod.tolerations as { key: string; value: string; effect: string }[];
          assert.ok(readme.includes(`kubectl label nodes NODE ${toleration!.key}=${toleration!.value}\n`));
          assert.ok(
            readme.includes(`kubectl taint nodes NODE ${toleration!.key}=${toleration!.value}:${toleration!.effect}\n`),
          );
        } else {
          // Every other workload, one added later included: the pool's nodes are refused, and no taint of theirs tolerated.
          assert.deepEqual(
            refused,
            [{ matchExpressions: [{ key: "oz0.dev/pool", operator: "NotIn", values: ["sandbox"] }] }],
            `${overlay} ${w.kind}/${w.name}`,
          );
          assert.equal(w.pod.tolerations, undefined, `${overlay} ${w.name}`);
          assert.equal(w.pod.nodeSelector?.["oz0.dev/pool"], undefined, `${overlay} ${w.name}`);
        }
      }
    }
  });
});

void describe("the API token check catches a token projected by hand", () => {
  void it("in the container that runs harnesses, or with the node API's audience elsewhere", () => {
    const prod = render(path.join(k8sDir, "overlays", "prod"));
    assert.deepEqual(apiTokenFindings(prod), []);
    const broken = (change: (pod: Any) => void, name = "sandbox"): K8sObject[] => {
      const copy = structuredClone(prod) as Any[];
      change(
        copy.find((o) => ["Deployment", "StatefulSet"].includes(o.kind) && o.metadata.name === name).spec.template.spec,
      );
      return copy;
    };
    // What the admission controller adds when automount is on (kube-api-access-*), written into the pod instead.
    const apiAccess = broken((pod) => {
      pod.volumes.push({
        name: "kube-api-access",
        projected: { sources: [{ serviceAccountToken: { path: "token", expirationSeconds: 3607 } }] },
      });
      pod.containers[0].volumeMounts.push({
        name: "kube-api-access",
        mountPath: "/var/run/secrets/kubernetes.io/serviceaccount",
        readOnly: true,
      });
    });
    assert.match(
      apiTokenFindings(apiAccess).join("\n"),
      /sandbox: volume kube-api-access projects a ServiceAccount token for the Kubernetes API/,
    );
    const apiServer = broken((pod) => {
      pod.volumes.find((v: Any) => v.name === "node-identity").projected.sources[0].serviceAccountToken.audience =
        "https://kubernetes.default.svc";
    });
    assert.match(
      apiTokenFindings(apiServer).join("\n"),
      /projects a ServiceAccount token for https:\/\/kubernetes\.default\.svc/,
    );
    const elsewhere = broken(
      (pod) =>
        pod.volumes.push({
          name: "node-identity",
          projected: { sources: [{ serviceAccountToken: { audience: NODE_IDENTITY_AUDIENCE, path: "token" } }] },
        }),
      "llm-proxy",
    );
    assert.match(
      apiTokenFindings(elsewhere).join("\n"),
      /llm-proxy: volume node-identity projects a node identity token/,
    );
  });
});
