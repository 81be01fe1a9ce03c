#!/usr/bin/env node
// The heartbeat sidecar process (oz0-sandbox-heartbeat): configuration from
// the environment; SIGTERM advertises capacity 0 until the sandbox beside it
// stops answering, then exits.
import { createLogger, onShutdownSignal } from "@oz0/serving";
import { startHeartbeatSidecar } from "./heartbeat-sidecar.js";
import { heartbeatSidecarConfigFromEnv } from "./sandbox-config.js";

const logger = createLogger({ name: "sandbox-heartbeat" });
try {
  // OZ0_HEALTH_PORT: where the kubelet's liveness and readiness probes ask (HTTP /livez, /readyz).
  const healthPort = process.env.OZ0_HEALTH_PORT ? Number(process.env.OZ0_HEALTH_PORT) : undefined;
  if (healthPort !== undefined && !(Number.isInteger(healthPort) && healthPort > 0 && healthPort < 65536))
    throw new Error(`OZ0_HEALTH_PORT must be a port number, got ${JSON.stringify(process.env.OZ0_HEALTH_PORT)}`);
  const sidecar = startHeartbeatSidecar({
    ...heartbeatSidecarConfigFromEnv(process.env),
    logger,
    ...(healthPort === undefined ? {} : { healthPort }),
  });
  logger.info(
    { node: sidecar.node.id, url: sidecar.node.advertiseUrl },
    "sending this node's heartbeats from beside the sandbox",
  );
  // Nothing else keeps the event loop busy: the heartbeat's timer is unreferenced.
  const keepAlive = setInterval(() => undefined, 1 << 30);
  onShutdownSignal(logger, async () => {
    // The sandbox beside it gets the same signal: capacity 0 until it is gone.
    await sidecar.drain();
    clearInterval(keepAlive);
  });
} catch (error) {
  logger.fatal({ err: error }, "the heartbeat sidecar could not start");
  process.exitCode = 1;
}
