#!/usr/bin/env node
// The heartbeat sidecar process (oz0-sandbox-heartbeat): configuration from
// the environment; SIGTERM advertises capacity 0 until the sandbox beside it
// stops answering, then exits.
import { configFromEnvOrExit, createLogger, onShutdownSignal } from "@oz0/serving";
import { startHeartbeatSidecar } from "./heartbeat-sidecar.js";
import { heartbeatSidecarConfigFromEnv } from "./sandbox-config.js";

const logger = createLogger({ name: "sandbox-heartbeat" });
try {
  // A malformed variable stops here, named, with exit code 2, before anything starts.
  const config = configFromEnvOrExit("oz0-sandbox-heartbeat", () => heartbeatSidecarConfigFromEnv(process.env));
  const sidecar = startHeartbeatSidecar({ ...config, logger });
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
