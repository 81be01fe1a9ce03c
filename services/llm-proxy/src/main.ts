#!/usr/bin/env node
// The llm-proxy process: environment in, startLlmProxy, SIGTERM out.
import { createLogger, onShutdownSignal } from "@oz0/serving";
import { loadKek, loadProvidersFile, startLlmProxy } from "./index.js";

const logger = createLogger({ name: "llm-proxy" });
try {
  const env = process.env;
  const proxy = await startLlmProxy({
    port: Number(env.OZ0_PORT ?? 7702),
    host: env.OZ0_HOST ?? "127.0.0.1",
    dataDir: env.OZ0_LLM_PROXY_DATA ?? ".oz0/llm-proxy",
    ...(env.OZ0_PROVIDERS_FILE ? { providers: loadProvidersFile(env.OZ0_PROVIDERS_FILE) } : {}),
    ...(env.OZ0_EVENTS_URL ? { eventsUrl: env.OZ0_EVENTS_URL } : {}),
    ...(env.OZ0_LLM_PROXY_ADMIN_TOKEN ? { adminToken: env.OZ0_LLM_PROXY_ADMIN_TOKEN } : {}),
    ...((): { kek?: Buffer } => {
      const kek = loadKek(env);
      return kek ? { kek } : {};
    })(),
    logger,
  });
  onShutdownSignal(logger, () => proxy.close());
} catch (error) {
  logger.fatal({ message: (error as Error).message }, "llm-proxy could not start");
  process.exitCode = 1;
}
