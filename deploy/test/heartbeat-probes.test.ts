// The node-heartbeat sidecar's probes, as prod renders them, against its real
// entry point (services/sandbox/dist/heartbeat-main.js, what the container
// runs): the port and paths the kubelet asks answer 200, with the sandbox
// and the orchestrator both unreachable (liveness must not restart a sidecar
// for what a restart would not fix).
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { deployDir, k8sDir, render } from "./support/render.js";
import { container, workload, type Any } from "./support/workloads.js";

const entry = path.resolve(deployDir, "..", "services", "sandbox", "dist", "heartbeat-main.js");

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function status(port: number, probePath: string): Promise<number | undefined> {
  try {
    return (await fetch(`http://127.0.0.1:${port}${probePath}`, { signal: AbortSignal.timeout(1_000) })).status;
  } catch {
    return undefined;
  }
}

void describe("the node-heartbeat sidecar's probes (prod)", () => {
  let sidecar: Any;
  let child: ChildProcess | undefined;
  let healthPort = 0;
  before(async () => {
    sidecar = container(workload(render(path.join(k8sDir, "overlays", "prod")), "sandbox").pod, "node-heartbeat");
    assert.ok(existsSync(entry), `${entry} is built (npm run build)`);
    healthPort = await freePort();
    const nowhere = `http://127.0.0.1:${await freePort()}`;
    // The manifest's command, with local stand-ins for what only a cluster has.
    const [command, script] = sidecar.command as string[];
    assert.equal(command, "node");
    assert.equal(script, "services/sandbox/dist/heartbeat-main.js");
    child = spawn(process.execPath, [entry], {
      env: {
        PATH: process.env.PATH ?? "",
        OZ0_SANDBOX_URL: nowhere,
        OZ0_ORCHESTRATOR_URL: nowhere,
        OZ0_NODE_TOKEN: "t".repeat(32),
        OZ0_NODE_ID: "probe-test",
        OZ0_ADVERTISE_URL: "http://10.0.0.1:7701",
        OZ0_HEARTBEAT_MS: "1000",
        OZ0_HEALTH_PORT: String(healthPort),
        OZ0_LOG_LEVEL: "fatal",
      },
      stdio: "ignore",
    });
  });
  after(() => {
    child?.kill("SIGKILL");
  });

  void it("answers the liveness and readiness probes at the port OZ0_HEALTH_PORT names, while nothing it talks to answers", async () => {
    const manifestPort = Number(sidecar.env.find((e: Any) => e.name === "OZ0_HEALTH_PORT").value);
    for (const probe of [sidecar.livenessProbe, sidecar.readinessProbe]) assert.equal(probe.httpGet.port, manifestPort);
    const deadline = Date.now() + 15_000;
    const paths = [sidecar.livenessProbe.httpGet.path as string, sidecar.readinessProbe.httpGet.path as string];
    let answers: Array<number | undefined> = [];
    while (Date.now() < deadline) {
      answers = await Promise.all(paths.map((p) => status(healthPort, p)));
      if (answers.every((a) => a === 200)) break;
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.deepEqual(answers, [200, 200], `${paths.join(", ")} answered ${answers.join(", ")}`);
    assert.equal(await status(healthPort, "/"), 404, "nothing else is served");
  });
});
