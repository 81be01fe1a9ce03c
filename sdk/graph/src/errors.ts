/**
 * Every failure this package raises carries a stable `code`, so the
 * orchestrator can map it to an RPC status without parsing messages.
 */
export type GraphErrorCode =
  | "INVALID_DEFINITION"
  | "INVALID_DECLARATION"
  | "UNKNOWN_STEP"
  | "STEP_FAILED"
  | "STEP_TIMED_OUT"
  | "CHOICE_NO_LABEL"
  | "CHOICE_NO_ARM"
  | "LOOP_BAD_CHOICE"
  | "RUN_IN_FLIGHT"
  | "RUN_ABORTED"
  | "RUN_CANCELLED"
  | "RUN_NOT_FOUND"
  | "RUN_FINISHED"
  | "DEFINITION_MISMATCH"
  | "BRANCH_CANCELLED"
  | "MANAGER_FAILED"
  | "BAG_NOT_JSON";

/** An error raised by the graph SDK or engine; `code` is stable, `message` says what to do. */
export class GraphError extends Error {
  /** Stable machine-readable code. */
  public readonly code: GraphErrorCode;

  public constructor(code: GraphErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GraphError";
    this.code = code;
  }
}

/** One problem found when validating a definition, with the field it concerns. */
export interface DefinitionProblem {
  /** Stable code, e.g. `LOOP_MISSING_UNTIL`. */
  code: string;
  /** JSON-pointer-like location in the definition, e.g. `/root/2/until`. */
  path: string;
  /** What is wrong and how to fix it. */
  message: string;
}

/** Raised when a definition is refused at publish time; `problems` lists every finding. */
export class GraphValidationError extends GraphError {
  /** All problems found, in document order. */
  public readonly problems: readonly DefinitionProblem[];

  public constructor(problems: readonly DefinitionProblem[]) {
    super(
      "INVALID_DEFINITION",
      `the graph definition is invalid: ${problems.map((p) => `${p.path || "/"}: ${p.message}`).join("; ")}`,
    );
    this.name = "GraphValidationError";
    this.problems = problems;
  }
}
