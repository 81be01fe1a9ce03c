// @oz0/orchestrator: the orchestrator service and the pieces the CLI and tests use.
export { startOrchestrator, defaultHome } from "./start-orchestrator.js";
export type { OrchestratorConfig, RunningOrchestrator } from "./start-orchestrator.js";
export { SqliteJobStore } from "./store/sqlite-store.js";
export type {
  AgentVersionRecord,
  JobAppend,
  JobPatch,
  JobRecord,
  JobStateName,
  JobStore,
  ListJobsQuery,
  ListPermissionsQuery,
  NewAgentVersion,
  PermissionRecord,
  PluginRecord,
  PublishResult,
  ResolvedHarness,
} from "./store/job-store.js";
export { PermissionPolicy, toolListStage, requiresApprovalStage, allowedTools } from "./policy/permission-policy.js";
export type { PermissionQuestion, PermissionStage, PolicyDecision } from "./policy/permission-policy.js";
export { OrchestratorError } from "./orchestrator-error.js";
export type { OrchestratorErrorCode } from "./orchestrator-error.js";
export { agentContentHash, canonicalJson, parseDuration } from "./agents/agent-versions.js";

export {
  isolationNotice,
  startEmbeddedStack,
  startServiceProcess,
  serviceMain,
  readDiscovery,
  discoveryFile,
} from "./dev/embedded-stack.js";
export type {
  EmbeddedStack,
  EmbeddedStackOptions,
  StackProcess,
  StackServiceName,
  DevDiscovery,
} from "./dev/embedded-stack.js";
export { embeddedStackEnv, applyEnvironmentKeys, hasProviderKey } from "./cli/embedded-defaults.js";
export type { EmbeddedDefaults, EmbeddedDefaultsOptions } from "./cli/embedded-defaults.js";
