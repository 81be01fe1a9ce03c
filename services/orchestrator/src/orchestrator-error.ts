// Errors the domain modules throw. Each has a code the RPC layer maps to a
// Connect code, and a message that says what happened and what to do.

export type OrchestratorErrorCode =
  | "not_found"
  | "invalid_argument"
  | "already_exists"
  | "failed_precondition"
  | "permission_denied"
  | "unavailable"
  | "internal";

export class OrchestratorError extends Error {
  readonly code: OrchestratorErrorCode;

  constructor(code: OrchestratorErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "OrchestratorError";
    this.code = code;
  }
}

export function notFound(message: string): OrchestratorError {
  return new OrchestratorError("not_found", message);
}

export function invalidArgument(message: string): OrchestratorError {
  return new OrchestratorError("invalid_argument", message);
}

export function failedPrecondition(message: string): OrchestratorError {
  return new OrchestratorError("failed_precondition", message);
}

/** The caller is who they say, but a rule of the job's agent does not let them do this. */
export function permissionDenied(message: string): OrchestratorError {
  return new OrchestratorError("permission_denied", message);
}
