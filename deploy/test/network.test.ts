// Who may reach what in every rendered overlay, beyond the identity rules of
// identity.test.ts: the checks are in support/network-checks.ts, and the last
// suite breaks copies of prod and expects each check to say so.
import assert from "node:assert/strict";
import path from "node:path";
import { before, describe, it } from "node:test";
import {
  anyPodIngressFindings,
  eventsFindings,
  internetEgressFindings,
  kafkaFindings,
} from "./support/network-checks.js";
import { k8sDir, overlayDirs, render, type K8sObject } from "./support/render.js";
import type { Any } from "./support/workloads.js";

for (const dir of overlayDirs()) {
  const overlay = path.basename(dir);
  void describe(`network of ${overlay}`, () => {
    let objects: K8sObject[] = [];
    before(() => {
      objects = render(dir);
    });

    void it("lets only the events pods reach Kafka's listener (which also asks for a credential: kafka-auth.test.ts)", () => {
      assert.deepEqual(kafkaFindings(objects), []);
    });

    void it("lets only the orchestrator and the LLM proxy call events, and sandbox pods never", () => {
      assert.deepEqual(eventsFindings(objects), []);
    });

    void it("admits no pod by nothing it carries, of this namespace or another, and no address", () => {
      assert.deepEqual(anyPodIngressFindings(objects), []);
    });
  });
}

void describe("the network checks catch mistakes", () => {
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
  const policy = (objects: Any[], name: string): Any =>
    objects.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === name);
  const listener = (objects: Any[]): Any => objects.find((o) => o.kind === "Kafka").spec.kafka.listeners[0];

  void it("prod as rendered has no finding, and has a Kafka to check", () => {
    assert.ok(prod.some((o) => o.kind === "Kafka"));
    assert.deepEqual(kafkaFindings(prod), []);
    assert.deepEqual(eventsFindings(prod), []);
    assert.deepEqual(internetEgressFindings(prod), []);
    assert.deepEqual(anyPodIngressFindings(prod), []);
  });

  void it("Kafka's listener without its peers, with the sandbox's, or outside the cluster", () => {
    const open = broken((o) => delete listener(o).networkPolicyPeers);
    assert.match(kafkaFindings(open).join("\n"), /listener scram names no networkPolicyPeers: every pod/);
    const sandbox = broken((o) =>
      listener(o).networkPolicyPeers.push({ podSelector: { matchLabels: { "app.kubernetes.io/name": "sandbox" } } }),
    );
    assert.match(kafkaFindings(sandbox).join("\n"), /listener scram admits .*sandbox.*, not the events pods alone/);
    const outside = broken((o) => (listener(o).type = "loadbalancer"));
    assert.match(kafkaFindings(outside).join("\n"), /listener scram is of type loadbalancer, not internal/);
    const everyone = broken((o) => policy(o, "kafka-cluster").spec.ingress[0].from.push({ podSelector: {} }));
    const findings = kafkaFindings(everyone).join("\n");
    assert.match(findings, /kafka-cluster lets sandbox pods reach the Kafka pods/);
    assert.match(findings, /kafka-cluster lets orchestrator pods reach the Kafka pods/);
    const elsewhere = broken((o) => policy(o, "kafka-cluster").spec.ingress[0].from.push({ namespaceSelector: {} }));
    assert.match(kafkaFindings(elsewhere).join("\n"), /kafka-cluster lets .* reach the Kafka pods: another namespace/);
  });

  void it("events called by sandbox pods, at either end, or by another namespace", () => {
    const sandboxPeer = { podSelector: { matchLabels: { "app.kubernetes.io/name": "sandbox" } } };
    const admits = broken((o) => policy(o, "events").spec.ingress[0].from.push(sandboxPeer));
    assert.match(eventsFindings(admits).join("\n"), /NetworkPolicy events lets sandbox pods call events/);
    const reaches = broken((o) =>
      policy(o, "sandbox-telemetry").spec.egress.push({
        to: [{ podSelector: { matchLabels: { "app.kubernetes.io/name": "events" } } }],
        ports: [{ protocol: "TCP", port: 7703 }],
      }),
    );
    assert.match(eventsFindings(reaches).join("\n"), /sandbox-telemetry lets sandbox pods reach events/);
    const elsewhere = broken((o) => policy(o, "events").spec.ingress[0].from.push({ namespaceSelector: {} }));
    assert.match(eventsFindings(elsewhere).join("\n"), /lets .* call events: another namespace/);
    const cut = broken((o) => (policy(o, "events").spec.ingress[0].ports = [{ protocol: "TCP", port: 7710 }]));
    assert.match(eventsFindings(cut).join("\n"), /orchestrator pods cannot reach events on 7703/);
  });

  void it("a way out of the cluster for more pods than llm-proxy, or to private ranges", () => {
    const internet = (o: Any[]): Any => policy(o, "llm-proxy").spec.egress[0];
    // The proxy's rule in a policy of its own, selecting every pod but the sandbox's: the others would leave too.
    const shared = broken((o) =>
      o.push({
        apiVersion: "networking.k8s.io/v1",
        kind: "NetworkPolicy",
        metadata: { name: "egress-internet", namespace: "oz0" },
        spec: {
          podSelector: {
            matchExpressions: [{ key: "app.kubernetes.io/name", operator: "NotIn", values: ["sandbox"] }],
          },
          policyTypes: ["Egress"],
          egress: [structuredClone(internet(o))],
        },
      }),
    );
    assert.match(
      internetEgressFindings(shared).join("\n"),
      /egress-internet lets pods it selects .* leave the cluster/,
    );
    const everyone = broken((o) => (policy(o, "llm-proxy").spec.podSelector = {}));
    assert.match(
      internetEgressFindings(everyone).join("\n"),
      /NetworkPolicy llm-proxy lets pods it selects \(\{\}\) leave the cluster/,
    );
    const metadata = broken((o) => {
      const except: string[] = internet(o).to[0].ipBlock.except;
      except.splice(except.indexOf("169.254.0.0/16"), 1);
    });
    assert.match(internetEgressFindings(metadata).join("\n"), /169\.254\.0\.0\/16 is not excluded/);
    const anyPort = broken((o) => delete internet(o).ports);
    assert.match(internetEgressFindings(anyPort).join("\n"), /llm-proxy leaves on undefined, not 443 only/);
  });

  void it("an ingress peer with a `from` that still admits every pod", () => {
    // The node API open to every namespace: heartbeats still pass, and every other check with them.
    const nodeApi = broken((o) => policy(o, "orchestrator").spec.ingress[1].from.push({ namespaceSelector: {} }));
    assert.match(
      anyPodIngressFindings(nodeApi).join("\n"),
      /orchestrator ingress\[1\] admits any pod of another namespace through \{"namespaceSelector":\{\}\}/,
    );
    const collector = broken((o) => (policy(o, "otel-collector").spec.ingress[0].from = [{ podSelector: {} }]));
    const findings = anyPodIngressFindings(collector).join("\n");
    assert.match(findings, /otel-collector ingress\[0\] admits any pod of oz0/);
    assert.doesNotMatch(findings, /another namespace/);
    const allBut = broken(
      (o) =>
        (policy(o, "kafka-cluster").spec.ingress[0].from = [
          {
            podSelector: {
              matchExpressions: [{ key: "app.kubernetes.io/name", operator: "NotIn", values: ["sandbox"] }],
            },
          },
        ]),
    );
    assert.match(anyPodIngressFindings(allBut).join("\n"), /kafka-cluster ingress\[0\] admits any pod of oz0/);
    const addresses = broken((o) => policy(o, "events").spec.ingress[0].from.push({ ipBlock: { cidr: "0.0.0.0/0" } }));
    assert.match(anyPodIngressFindings(addresses).join("\n"), /events ingress\[0\] admits addresses/);
  });
});
