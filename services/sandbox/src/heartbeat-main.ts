#!/usr/bin/env node
// The heartbeat sidecar process (oz0-sandbox-heartbeat): configuration from
// the environment; SIGTERM sends a last heartbeat with capacity 0, then exits.
import { createLogger, onShutdownSignal } from "@oz0/serving";
import { startHeartbeatSidecar } from "./heartbeat-sidecar.js";
import { heartbeatSidecarConfigFromEnv } from "./sandbox-config.js";

const logger = createLogger({ name: "sandbox-heartbeat" });
try {
  const sidecar = startHeartbeatSidecar({ ...heartbeatSidecarConfigFromEnv(process.env), logger });
  logger.info({ node: sidecar.node.id, url: sidecar.node.advertiseUrl }, "sending this node's heartbeats from beside the sandbox");
  // Nothing else keeps the event loop busy: the heartbeat's timer is unreferenced.
  const keepAlive = setInterval(() => undefined, 1 << 30);
  onShutdownSignal(logger, async () => {
    await sidecar.stop({ drain: true });
    clearInterval(keepAlive);
  });
} catch (error) {
  logger.fatal({ err: error }, "the heartbeat sidecar could not start");
  process.exitCode = 1;
}
