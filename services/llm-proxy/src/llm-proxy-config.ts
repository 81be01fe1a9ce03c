// The LLM proxy's configuration as the environment gives it (README,
// "Environment"), read and validated in one place: a malformed value is an
// EnvConfigError naming the variable and the form it expects, and main.ts
// stops on it before anything listens. The KEK and the providers file are
// read here too, so a bad one also stops the start (with their own errors).
import {
  authSettingsFromEnv,
  EnvConfigError,
  envInteger,
  envList,
  envMaxMessageBytes,
  envPort,
  envString,
  envUrl,
  isWildcardHost,
} from "@oz0/serving";
import type { LlmProxyConfig } from "./index.js";
import { loadKek } from "./key-vault.js";
import { loadProvidersFile } from "./provider-config.js";

export const DEFAULT_PORT = 7702;

/** Everything `startLlmProxy` takes from the environment (the logger is the caller's). */
export function configFromEnv(env: NodeJS.ProcessEnv): LlmProxyConfig {
  const databaseUrl = envString(env, "DATABASE_URL");
  const databaseSchema = envString(env, "OZ0_DATABASE_SCHEMA");
  const secretsDir = envString(env, "OZ0_SECRETS_DIR");
  const providersFile = envString(env, "OZ0_PROVIDERS_FILE");
  const eventsUrl = envUrl(env, "OZ0_EVENTS_URL");
  const attemptTimeoutMs = envInteger(env, "OZ0_UPSTREAM_TIMEOUT_MS", { min: 1, unit: "milliseconds" });
  const streamIdleTimeoutMs = envInteger(env, "OZ0_STREAM_IDLE_TIMEOUT_MS", { min: 1, unit: "milliseconds" });
  const kek = loadKek(env);
  const maxMessageBytes = envMaxMessageBytes(env);
  const maxModelRequestBytes = envInteger(env, "OZ0_MAX_MODEL_REQUEST_BYTES", { min: 1, unit: "bytes" });
  const maxSessionBytesInFlight = envInteger(env, "OZ0_MAX_SESSION_BYTES_IN_FLIGHT", { min: 1, unit: "bytes" });
  const maxBytesInFlight = envInteger(env, "OZ0_MAX_BYTES_IN_FLIGHT", { min: 1, unit: "bytes" });
  const providerSideFeatures = envList(env, "OZ0_PROVIDER_SIDE_FEATURES", {
    valid: (feature) => /^[a-z][a-z0-9_]*$/.test(feature),
    expected: "a comma-separated list of feature names such as web_search,code_execution",
  });
  const host = envString(env, "OZ0_HOST") ?? "127.0.0.1";
  const publicUrl = envUrl(env, "OZ0_PUBLIC_URL");
  // Sessions are told where the proxy is; "every interface" is no place to call.
  if (!publicUrl && isWildcardHost(host))
    throw new EnvConfigError(
      "OZ0_PUBLIC_URL",
      `the URL sessions reach the proxy at, since OZ0_HOST=${host} listens on every interface (in Kubernetes, the llm-proxy Service's address)`,
      "",
    );
  return {
    port: envPort(env, "OZ0_PORT") ?? DEFAULT_PORT,
    host,
    ...(publicUrl ? { publicUrl } : {}),
    dataDir: envString(env, "OZ0_LLM_PROXY_DATA") ?? ".oz0/llm-proxy",
    // PostgreSQL instead of the SQLite file: what several replicas share.
    ...(databaseUrl ? { databaseUrl } : {}),
    ...(databaseSchema ? { databaseSchema } : {}),
    ...(secretsDir ? { secretsDir } : {}),
    ...(providersFile ? { providers: loadProvidersFile(providersFile) } : {}),
    ...(eventsUrl ? { eventsUrl } : {}),
    auth: authSettingsFromEnv(env),
    ...(attemptTimeoutMs !== undefined || streamIdleTimeoutMs !== undefined
      ? {
          retry: {
            ...(attemptTimeoutMs !== undefined ? { attemptTimeoutMs } : {}),
            ...(streamIdleTimeoutMs !== undefined ? { streamIdleTimeoutMs } : {}),
          },
        }
      : {}),
    ...(kek ? { kek } : {}),
    ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
    ...(maxModelRequestBytes !== undefined ? { maxModelRequestBytes } : {}),
    ...(maxSessionBytesInFlight !== undefined ? { maxSessionBytesInFlight } : {}),
    ...(maxBytesInFlight !== undefined ? { maxBytesInFlight } : {}),
    ...(providerSideFeatures.length > 0 ? { providerSideFeatures } : {}),
  };
}
