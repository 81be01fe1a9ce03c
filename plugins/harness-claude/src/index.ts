// @oz0/harness-claude: the Claude Agent SDK as an Orchestrator Zero harness.
export { runClaudeSession, type RunClaudeSessionOptions } from "./claude-session.js";
export {
  DEFAULT_TOOLS,
  HarnessOptionsError,
  PERMISSION_MODES,
  SUPPORTED_TOOLS,
  SYSTEM_PROMPT_MODES,
  parseHarnessOptions,
  validateHarnessOptions,
  type ClaudeHarnessOptions,
  type ClaudePermissionMode,
  type HarnessOptionProblem,
  type SupportedTool,
  type SystemPromptMode,
} from "./harness-options.js";
export { buildSessionEnvironment, customHeaders, type SessionEnvironmentOptions } from "./session-environment.js";
export { buildQueryOptions, claudeModelName, SessionRequestError } from "./query-options.js";
export type { ClaudeSessionHost, EventSink } from "./session-port.js";
