// A node's heartbeats sent from beside the sandbox rather than from inside
// it. Without bubblewrap a harness runs as the sandbox's own user and could
// read the node token from the sandbox process (/proc/<pid>/environ); in a
// container of its own (Kubernetes gives each container its own PID
// namespace) the token is out of the harnesses' reach. Each beat asks the
// sandbox over loopback what it would have sent itself: its capacity
// (ListSessions), its running sessions, and whether it takes work
// (readiness), with a credential of its own for that (OZ0_NODE_TOKEN_FOR_SANDBOX),
// so the node token never reaches the sandbox's memory either. A sandbox that
// does not answer gets no heartbeat, so the
// orchestrators stop placing on it; one that drains is advertised with
// capacity 0, and so is the node while the sidecar itself drains (until the
// sandbox beside it is gone). With a health port it answers the kubelet's
// probes over plain HTTP: /livez while the heartbeat loop still turns,
// /readyz once the first heartbeat was tried (neither says anything more).
import { createServer } from "node:http";
import os from "node:os";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "@oz0/proto/grpc/health/v1/health_pb";
import { SandboxService } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { bearerInterceptor, READINESS, type Logger } from "@oz0/serving";
import { startNodeHeartbeat, type NodeHeartbeat, type NodeStatus } from "./node-heartbeat.js";
import type { HeartbeatSidecarConfig } from "./sandbox-config.js";

export interface RunningHeartbeatSidecar extends NodeHeartbeat {
  /** What it sends heartbeats as. */
  readonly node: { id: string; advertiseUrl: string };
  /**
   * For a pod shutting down: keeps sending heartbeats at capacity 0 while
   * the sandbox still answers (its sessions are ending, and orchestrators
   * must not take the node for lost meanwhile), then a last one, then stops.
   * Gives up waiting after `maxMs` (default 60 s).
   */
  drain(options?: { maxMs?: number }): Promise<void>;
}

/** The largest answer the sidecar reads from the sandbox: a ListSessions of thousands of sessions fits. */
const SIDECAR_READ_MAX_BYTES = 4 * 1024 * 1024;

export function startHeartbeatSidecar(config: HeartbeatSidecarConfig & { logger: Logger }): RunningHeartbeatSidecar {
  // The sandbox lets this credential list its sessions, and nothing else.
  if (!config.sandboxToken)
    config.logger.warn(
      "OZ0_NODE_TOKEN_FOR_SANDBOX is unset, so the sandbox beside this sidecar is sent the node token, and holds it in its memory: a harness that can read that memory (no Landlock, ptrace_scope 0) could register nodes and be sent other jobs' sessions. Give the sidecar a credential of its own for the sandbox, and the sandbox its digest as OZ0_NODE_TOKEN_SHA256",
    );
  const transport = createGrpcTransport({
    baseUrl: config.sandboxUrl,
    interceptors: [bearerInterceptor(config.sandboxToken ?? config.nodeToken)],
    // A node's list of sessions is small; whatever answers on the sandbox's port while it restarts is not trusted
    // with Connect's default of 4 GiB, gzip included.
    readMaxBytes: SIDECAR_READ_MAX_BYTES,
  });
  const sandbox = createClient(SandboxService, transport);
  const health = createClient(Health, transport);
  const { hostname, port } = new URL(config.sandboxUrl);
  // Loopback is where the sidecar reaches the sandbox, not where orchestrators do.
  const node = {
    id: config.nodeId ?? `${os.hostname()}:${port}`,
    advertiseUrl: config.advertiseUrl ?? `http://${os.hostname()}:${port}`,
  };
  const timeoutMs = Math.min(Math.max(config.heartbeatMs, 1_000), 5_000);
  let draining = false;
  // Every beat (and every drain check) starts by reading the status: a loop that stopped turning leaves this behind.
  let lastTurn = Date.now();
  const status = async (): Promise<NodeStatus> => {
    lastTurn = Date.now();
    const [readiness, list] = await Promise.all([
      health.check({ service: READINESS }, { timeoutMs }),
      sandbox.listSessions({}, { timeoutMs }),
    ]).catch((error: unknown) => {
      throw new Error(`the sandbox at ${hostname}:${port} does not answer (${(error as Error).message})`);
    });
    return {
      capacity: !draining && readiness.status === HealthCheckResponse_ServingStatus.SERVING ? list.maxSessions : 0,
      running: list.sessions.filter((s) => s.endTime === undefined).length,
    };
  };
  const heartbeat = startNodeHeartbeat({
    orchestratorUrls: config.orchestratorUrls,
    nodeToken: config.nodeToken,
    ...(config.identityTokenFile ? { identityTokenFile: config.identityTokenFile } : {}),
    nodeId: node.id,
    advertiseUrl: node.advertiseUrl,
    status,
    intervalMs: config.heartbeatMs,
    logger: config.logger,
  });
  let firstTried = false;
  void heartbeat.first.then(() => (firstTried = true));
  // Generous: a beat may wait for the sandbox and for each orchestrator URL in turn before the next one starts.
  const stalledAfterMs = Math.max(60_000, 3 * config.heartbeatMs);
  const probes =
    config.healthPort === undefined
      ? undefined
      : createServer((request, response) => {
          const ok =
            request.url === "/livez"
              ? Date.now() - lastTurn < stalledAfterMs
              : request.url === "/readyz"
                ? firstTried
                : undefined;
          response
            .writeHead(ok === undefined ? 404 : ok ? 200 : 503, { "content-type": "text/plain" })
            .end(ok ? "ok\n" : "not ok\n");
        })
          .on("error", (error) =>
            config.logger.error(
              { err: error, port: config.healthPort },
              "the heartbeat sidecar's health port cannot listen: its probes fail",
            ),
          )
          .listen(config.healthPort, "0.0.0.0");
  const closeHealth = (): void => void probes?.close();
  return {
    node,
    first: heartbeat.first,
    stop: (options) => heartbeat.stop(options).finally(closeHealth),
    async drain({ maxMs = 60_000 } = {}) {
      draining = true;
      const giveUp = Date.now() + maxMs;
      // The heartbeats go on by themselves (now at capacity 0); this only watches for the sandbox to go.
      // Gone means three checks in a row without an answer: one slow answer from a busy sandbox is not enough.
      let unanswered = 0;
      while (Date.now() < giveUp && unanswered < 3) {
        await new Promise((resolve) => setTimeout(resolve, Math.min(config.heartbeatMs, 1_000)));
        unanswered = await status().then(
          () => 0,
          () => unanswered + 1,
        );
      }
      await heartbeat.stop({ drain: true });
      closeHealth();
    },
  };
}
