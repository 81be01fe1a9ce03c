// Why an ACP session ended with an error, as codes a test (or a log query)
// can switch on; the message says what the agent did and what to check.

/** Codes of {@link AcpSessionError}. */
export type AcpSessionErrorCode =
  /** The agent command could not be started. */
  | "agent_start_failed"
  /** The agent wrote a stdout line that is not a JSON-RPC 2.0 message. */
  | "malformed_message"
  /** `session/update` carried an update kind this harness does not know. */
  | "unknown_update"
  /** An update or permission request that breaks the ACP schema. */
  | "invalid_message"
  /** A permission request for a tool call the agent never announced. */
  | "unannounced_tool_call"
  /** A tool call reported running or done that no permission request answered allow. */
  | "unpermitted_tool_call"
  /** The agent is, or switched to, a session mode other than the one that asks before every tool call. */
  | "permission_mode"
  /** The agent speaks another ACP protocol version. */
  | "unsupported_protocol_version"
  /** `initialize`, `session/new` or `session/prompt` was answered with an error. */
  | "request_failed"
  /** The agent exited, or closed stdout, before the prompt turn ended. */
  | "agent_exited";

/** Thrown (or recorded) when the ACP agent misbehaves; becomes a STOP_REASON_ERROR result. */
export class AcpSessionError extends Error {
  readonly code: AcpSessionErrorCode;
  constructor(code: AcpSessionErrorCode, message: string) {
    super(message);
    this.name = "AcpSessionError";
    this.code = code;
  }
}
