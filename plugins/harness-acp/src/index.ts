// @oz0/harness-acp: any Agent Client Protocol agent as an Orchestrator Zero harness.
export { AcpSessionRun, DEFAULT_CANCEL_GRACE_MS, resultForStopReason } from "./acp-session.js";
export type { AcpSessionOptions } from "./acp-session.js";
export { AcpSessionError } from "./acp-errors.js";
export type { AcpSessionErrorCode } from "./acp-errors.js";
export {
  AGENT_PRESET_NAMES,
  AgentNotInstalledError,
  claudeAgentAcpEntry,
  isAgentPresetName,
  presetLaunch,
} from "./agent-presets.js";
export type { AgentLaunch, AgentPresetName, PresetContext } from "./agent-presets.js";
export { buildAgentEnvironment, customHeaderLines, fillPlaceholders } from "./agent-environment.js";
export type { AgentEnvironmentOptions } from "./agent-environment.js";
export { jsonRpcProblem, startAgentProcess } from "./agent-process.js";
export type { AgentProcess, AgentProcessOptions } from "./agent-process.js";
export {
  ENV_PLACEHOLDERS,
  HarnessOptionsError,
  MODEL_ENV_STYLES,
  parseHarnessOptions,
  validateHarnessOptions,
} from "./harness-options.js";
export type { AcpHarnessOptions, AgentSpec, HarnessOptionProblem, ModelEnvStyle } from "./harness-options.js";
export { answerPermissionRequest, pathOutside } from "./permission-bridge.js";
export type { AcpPermissionResponse, PermissionBridgeOptions } from "./permission-bridge.js";
export { SessionUpdateMapper, toolName, toolOutput } from "./session-update-mapper.js";
export type { EventSink, TrackedToolCall } from "./session-update-mapper.js";
