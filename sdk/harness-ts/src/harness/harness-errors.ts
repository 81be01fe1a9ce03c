// Errors the harness side raises, with codes a harness author can switch on.

/** Codes of {@link HarnessSessionError}. */
export type HarnessSessionErrorCode =
  /** stdin ended before a session request arrived. */
  | "no_request"
  /** The first stdin line is not a valid SessionRequest. */
  | "invalid_request"
  /** The request's protocol version is not one this SDK speaks. */
  | "unsupported_protocol_version"
  /** `result` was already written; nothing may follow it. */
  | "result_already_sent"
  /** The session was cancelled (SIGTERM) while waiting. */
  | "cancelled"
  /** The runtime closed stdin while an answer was awaited. */
  | "runtime_gone";

/** Thrown by the harness-side session; `code` says which rule was hit. */
export class HarnessSessionError extends Error {
  /** Which problem this is. */
  readonly code: HarnessSessionErrorCode;

  /** Creates an error with a code and a message that says what happened. */
  constructor(code: HarnessSessionErrorCode, message: string) {
    super(message);
    this.name = "HarnessSessionError";
    this.code = code;
  }
}
