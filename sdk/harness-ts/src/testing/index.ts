// @oz0/harness/testing: the scripted model and the conformance kit.
export { startScriptedModel, isClaudeCodeSideCall, modelTurnsIn, SIDE_CALL_REPLY } from "./scripted-model.js";
export type {
  ScriptedModel,
  ScriptedModelOptions,
  Script,
  ScriptedRequest,
  ScriptedToolCall,
  ScriptedTurn,
  ScriptedUsage,
  ScriptedWireFormat,
  TokensServed,
} from "./scripted-model.js";
export {
  runConformance,
  readExpectedFailures,
  formatCaseLine,
  formatOtherCounts,
  formatSummary,
  formatUntestedRoutes,
  CONFORMANCE_REPORT_VERSION,
} from "./conformance/run-conformance.js";
export type { ModelRoute, RouteSelection } from "./conformance/model-routes.js";
export type {
  ConformanceOptions,
  ConformanceReport,
  ConformanceCaseResult,
  ConformanceCaseStatus,
} from "./conformance/run-conformance.js";
export { CONFORMANCE_CASES } from "./conformance/conformance-cases.js";
export type { ConformanceCase, CapabilityName, CaseLevel } from "./conformance/conformance-cases.js";
export { ConformanceFailure, formatTranscript } from "./conformance/conformance-scenario.js";
export type { TranscriptLine } from "./conformance/conformance-scenario.js";
export { sessionEnvironment } from "./conformance/session-environment.js";
export { defaultSessionPath, stateSubdirectories, QUIET_HARNESS_ENV } from "../host/session-environment.js";
export type { SessionEnvironmentInput } from "./conformance/session-environment.js";
export { resolveHarnessCommand } from "./conformance/harness-command.js";
export {
  CLAUDE_CODE_TOOL_PROFILE,
  KNOWN_TOOL_PROFILES,
  OZ0_TOOL_PROFILE,
  detectToolProfile,
  loadToolProfile,
  offeredToolNames,
  toolProfileFromJson,
} from "./conformance/tool-profiles.js";
export type { ToolProfile, ToolProfileJson } from "./conformance/tool-profiles.js";
