// Several replicas on PostgreSQL (issue 13): what each rendered overlay wires
// so orchestrators, sandbox nodes and LLM proxies can run side by side: the
// shared OZ0_HOME volume, the database and the node registration.
import assert from "node:assert/strict";
import path from "node:path";
import { before, describe, it } from "node:test";
import { overlayDirs, render, type K8sObject } from "./support/render.js";
import { containerEnv, workload, workloads, type Any } from "./support/workloads.js";

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
      const home = containerEnv(objects, orchestrator.pod.containers[0]).OZ0_HOME;
      assert.ok(home?.startsWith("/"), "OZ0_HOME is an absolute path");
      const claimOf = (pod: Any, volume: string): string | undefined => pod.volumes.find((v: Any) => v.name === volume)?.persistentVolumeClaim?.claimName;

      const homeMount = orchestrator.pod.containers[0].volumeMounts.find((m: Any) => m.mountPath === home);
      assert.ok(homeMount, "the orchestrator mounts a volume at OZ0_HOME");
      assert.notEqual(homeMount.readOnly, true, "the orchestrator writes plugin copies and artifacts there");
      assert.equal(homeMount.subPath, undefined);
      const claim = claimOf(orchestrator.pod, homeMount.name);
      assert.ok(claim, "OZ0_HOME is a PersistentVolumeClaim, not a pod's own emptyDir");

      const pluginMounts = sandbox.pod.containers[0].volumeMounts.filter((m: Any) => claimOf(sandbox.pod, m.name) === claim);
      assert.equal(pluginMounts.length, 1, "the sandbox mounts the shared volume once");
      const [plugins] = pluginMounts;
      // A session's plugin_dir is a path under OZ0_HOME/plugins on the orchestrator: the same path on the node.
      assert.equal(plugins.mountPath, `${home}/plugins`);
      assert.equal(plugins.subPath, "plugins", "only plugin copies: harness code never sees artifacts or the orchestrator's files");
      assert.equal(plugins.readOnly, true, "sandboxes only read plugin copies");

      for (const w of workloads(objects)) {
        if (w.name === "orchestrator" || w.name === "sandbox") continue;
        assert.ok(!(w.pod.volumes ?? []).some((v: Any) => v.persistentVolumeClaim?.claimName === claim), `${w.name} mounts ${claim}`);
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
