// @oz0/harness/testing: the scripted model and the conformance kit.
export { startScriptedModel, isClaudeCodeSideCall, SIDE_CALL_REPLY } from "./scripted-model.js";
export type { ScriptedModel, ScriptedModelOptions, Script, ScriptedRequest, ScriptedToolCall, ScriptedTurn, ScriptedUsage, ScriptedWireFormat, TokensServed } from "./scripted-model.js";
export { runConformance, readExpectedFailures, formatCaseLine, formatSummary } from "./conformance/run-conformance.js";
export type { ConformanceOptions, ConformanceReport, ConformanceCaseResult, ConformanceCaseStatus } from "./conformance/run-conformance.js";
export { CONFORMANCE_CASES } from "./conformance/conformance-cases.js";
export type { ConformanceCase, CapabilityName } from "./conformance/conformance-cases.js";
export { ConformanceFailure, PLANTED_PROVIDER_KEYS } from "./conformance/conformance-scenario.js";
export { CLAUDE_CODE_TOOL_PROFILE, KNOWN_TOOL_PROFILES, OZ0_TOOL_PROFILE, detectToolProfile, offeredToolNames } from "./conformance/tool-profiles.js";
export type { ToolProfile } from "./conformance/tool-profiles.js";
