// The orchestrator's configuration as the environment gives it (README,
// "Running the service"), read and validated in one place: a malformed value
// stops the process at start with a message naming the variable and the form
// it expects, rather than a NaN port or a lease that never expires.
import path from "node:path";
import {
  authSettingsFromEnv,
  EnvConfigError,
  envInteger,
  envMaxMessageBytes,
  envNumber,
  envOneOf,
  envPort,
  envString,
  envUrl,
  envUrlList,
} from "@oz0/serving";
import { HOOK_ISOLATION_SETTINGS } from "./policy/hook-isolation.js";
import type { NodeIdentitySettings } from "./cluster/node-identity.js";
import type { OrchestratorConfig } from "./start-orchestrator.js";

/** Everything `startOrchestrator` takes from the environment (the logger is the caller's). */
export function configFromEnv(env: NodeJS.ProcessEnv): OrchestratorConfig {
  const home = envString(env, "OZ0_HOME");
  const llmProxyUrl = envUrl(env, "OZ0_LLM_PROXY_URL");
  const eventsUrl = envUrl(env, "OZ0_EVENTS_URL");
  const databaseUrl = envString(env, "DATABASE_URL");
  const databaseSchema = envString(env, "OZ0_DATABASE_SCHEMA");
  const replicaId = envString(env, "OZ0_REPLICA_ID");
  const leaseTtlMs = envInteger(env, "OZ0_LEASE_TTL_MS", { min: 100, unit: "milliseconds" });
  const nodeToken = envString(env, "OZ0_NODE_TOKEN");
  const nodePort = envPort(env, "OZ0_NODE_PORT");
  const nodeStaleAfterMs = envInteger(env, "OZ0_NODE_STALE_AFTER_MS", { min: 100, unit: "milliseconds" });
  const maxNodeCapacity = envInteger(env, "OZ0_MAX_NODE_CAPACITY", { min: 1, unit: "sessions" });
  const nodeIdentity = nodeIdentityFromEnv(env);
  const tokenSweepMs = envInteger(env, "OZ0_TOKEN_SWEEP_MS", { min: 100, unit: "milliseconds" });
  const maxSessionStderrBytes = envInteger(env, "OZ0_MAX_SESSION_STDERR_BYTES", {
    min: 0,
    unit: "bytes (0 keeps none)",
  });
  const maxSessionBytes = envInteger(env, "OZ0_MAX_SESSION_BYTES", { min: 1, unit: "bytes" });
  const maxWaitingApprovals = envInteger(env, "OZ0_MAX_WAITING_APPROVALS", { min: 1, unit: "calls" });
  const maxOperationsPerJob = envInteger(env, "OZ0_MAX_OPERATIONS_PER_JOB", { min: 1, unit: "operations" });
  const defaultBudgetUsd = envNumber(env, "OZ0_DEFAULT_MAX_BUDGET_USD", { min: 0.01, unit: "US dollars" });
  const maxTranscriptWatchesPerPerson = envInteger(env, "OZ0_MAX_TRANSCRIPT_WATCHES_PER_PERSON", {
    min: 1,
    unit: "streams",
  });
  const consoleDir = envString(env, "OZ0_CONSOLE_DIR");
  const roots = envString(env, "OZ0_ATTACHMENT_ROOTS");
  const attachmentRoots = (roots ?? "").split(":").filter(Boolean);
  if (attachmentRoots.some((root) => !path.isAbsolute(root)))
    throw new EnvConfigError("OZ0_ATTACHMENT_ROOTS", "`:`-separated absolute paths", roots ?? "");
  const maxMessageBytes = envMaxMessageBytes(env);
  const hookIsolation = envOneOf(env, "OZ0_HOOK_ISOLATION", HOOK_ISOLATION_SETTINGS);
  return {
    host: envString(env, "OZ0_HOST") ?? "127.0.0.1",
    port: envPort(env, "OZ0_PORT") ?? 7700,
    ...(home ? { home } : {}),
    sandboxUrls: envUrlList(env, "OZ0_SANDBOX_URLS"),
    ...(env.OZ0_LOCAL_STACK === "1" ? { localStack: true } : {}),
    ...(llmProxyUrl ? { llmProxyUrl } : {}),
    ...(eventsUrl ? { eventsUrl } : {}),
    ...(databaseUrl ? { databaseUrl } : {}),
    ...(databaseSchema ? { databaseSchema } : {}),
    ...(replicaId ? { replicaId } : {}),
    ...(leaseTtlMs !== undefined ? { leaseTtlMs } : {}),
    ...(nodeToken ? { nodeToken } : {}),
    ...(nodePort !== undefined ? { nodePort } : {}),
    ...(nodeIdentity ? { nodeIdentity } : {}),
    auth: authSettingsFromEnv(env),
    ...(nodeStaleAfterMs !== undefined ? { nodeStaleAfterMs } : {}),
    ...(maxNodeCapacity !== undefined ? { maxNodeCapacity } : {}),
    ...(tokenSweepMs !== undefined ? { tokenSweepMs } : {}),
    ...(maxSessionStderrBytes !== undefined ? { maxSessionStderrBytes } : {}),
    ...(maxSessionBytes !== undefined ? { maxSessionBytes } : {}),
    ...(maxWaitingApprovals !== undefined ? { maxWaitingApprovals } : {}),
    ...(maxOperationsPerJob !== undefined ? { maxOperationsPerJob } : {}),
    ...(defaultBudgetUsd !== undefined ? { defaultBudgetUsd } : {}),
    ...(maxTranscriptWatchesPerPerson !== undefined ? { maxTranscriptWatchesPerPerson } : {}),
    ...(consoleDir ? { consoleDir } : {}),
    ...(attachmentRoots.length > 0 ? { attachmentRoots } : {}),
    ...(maxMessageBytes !== undefined ? { maxMessageBytes } : {}),
    ...(hookIsolation ? { hookIsolation } : {}),
  };
}

const NODE_IDENTITY_VARIABLES = [
  "OZ0_NODE_IDENTITY_ISSUER",
  "OZ0_NODE_IDENTITY_JWKS_FILE",
  "OZ0_NODE_IDENTITY_SERVICE_ACCOUNT",
] as const;

/** The three settings of node identities, all or none: one alone would leave heartbeats unchecked without saying so. */
function nodeIdentityFromEnv(env: NodeJS.ProcessEnv): NodeIdentitySettings | undefined {
  const [issuer, jwksFile, serviceAccount] = NODE_IDENTITY_VARIABLES.map((name) => envString(env, name));
  if (issuer === undefined && jwksFile === undefined && serviceAccount === undefined) return undefined;
  const missing = NODE_IDENTITY_VARIABLES.filter((name) => envString(env, name) === undefined);
  if (missing.length > 0)
    throw new EnvConfigError(
      missing[0]!,
      `set together with ${NODE_IDENTITY_VARIABLES.filter((name) => name !== missing[0]).join(" and ")} (node identities, deploy/k8s/README.md)`,
      "",
    );
  return { issuer: issuer!, jwksFile: jwksFile!, serviceAccount: serviceAccount! };
}
