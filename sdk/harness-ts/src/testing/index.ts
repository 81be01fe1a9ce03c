// Filled in by the SDK work (issue 2).
export { startScriptedModel, isClaudeCodeSideCall, SIDE_CALL_REPLY } from "./scripted-model.js";
export type { ScriptedModel, ScriptedModelOptions, Script, ScriptedRequest, ScriptedToolCall, ScriptedTurn, ScriptedUsage, ScriptedWireFormat, TokensServed } from "./scripted-model.js";
