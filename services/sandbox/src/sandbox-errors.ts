// Errors the domain modules throw; the RPC handlers map `code` to a Connect
// Code, so nothing below sandbox-service.ts knows about Connect.

export type SandboxErrorCode =
  /** The request is malformed; the message names the field. */
  | "invalid_argument"
  /** The node takes no session now: it runs as many as it may, or its disk is below its floor. */
  | "resource_exhausted"
  /** No such session (or its log is past retention). */
  | "not_found"
  /** A session with this id already exists on the node. */
  | "already_exists"
  /** The sandbox is shutting down, or cannot isolate as configured. */
  | "unavailable"
  /** The request is valid but cannot apply in the current state. */
  | "failed_precondition";

export class SandboxError extends Error {
  readonly code: SandboxErrorCode;

  constructor(code: SandboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "SandboxError";
    this.code = code;
  }
}

/** Shorthand for the commonest error: a field that is wrong, named as the client wrote it. */
export function invalidField(field: string, problem: string): SandboxError {
  return new SandboxError("invalid_argument", `${field}: ${problem}`);
}
