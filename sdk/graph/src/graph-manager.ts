/**
 * The manager is not a step: the engine asks it only on control events. The
 * orchestrator implements {@link GraphManager} by invoking the harness's
 * `managerAgent` with the snapshot (secret keys masked) and the tools in
 * {@link managerTools}, then turning its tool call into a decision with
 * {@link decisionFromToolCall}.
 */
import { GraphError } from "./errors.js";

/** Something happened that the graph does not say how to handle. */
export type ControlEvent =
  | {
      kind: "step_error";
      runId: string;
      graph: string;
      nodeId: string;
      path: string;
      iteration: number;
      /** 1 on the first failure of this step, +1 per retry. */
      attempt: number;
      error: { code: string; message: string };
      snapshot: Record<string, unknown>;
    }
  | {
      kind: "max_iterations";
      runId: string;
      graph: string;
      nodeId: string;
      path: string;
      iteration: number;
      maxIterations: number;
      snapshot: Record<string, unknown>;
    }
  | {
      kind: "invoke_in_flight";
      runId: string;
      graph: string;
      /** The prompt of the invoke that arrived. */
      prompt: string;
      snapshot: Record<string, unknown>;
    };

/**
 * What the manager decided.
 * - `retry`: run the failed step again; at `max_iterations`, grant another `maxIterations` rounds.
 *   Both are capped by the runner's `maxRetries`; past it the step or loop fails with `STEP_FAILED`.
 * - `skip`: continue as if the step succeeded without writing; at `max_iterations`, leave the loop.
 * - `abort`: end the run as aborted.
 * - `answer`: use `text` as the step's output (step error, max iterations) or as the reply to an in-flight invoke.
 */
export type ManagerDecision =
  { action: "retry" } | { action: "skip" } | { action: "abort"; reason?: string } | { action: "answer"; text: string };

/** What the engine passes beside a control event. */
export interface DecideOptions {
  /**
   * Aborted when the run is cancelled (or, in a parallel branch, a sibling
   * failed) while the manager decides: the engine no longer waits for the
   * decision and records none, so stop the work deciding it (the orchestrator
   * cancels the manager agent's job). Absent for an in-flight invoke.
   */
  signal?: AbortSignal;
}

/** Decides control events for a run. */
export interface GraphManager {
  decide(event: ControlEvent, options?: DecideOptions): Promise<ManagerDecision>;
}

/** The tools offered to a manager agent, with JSON Schemas for their input. */
export const managerTools = [
  {
    name: "retry",
    description: "Run the failed step again (or, when the loop hit maxIterations, allow another round of iterations).",
    inputSchema: { type: "object", properties: {}, additionalProperties: false },
  },
  {
    name: "skip",
    description: "Skip the failed step and continue (or leave the loop that hit maxIterations).",
    inputSchema: { type: "object", properties: {}, additionalProperties: false },
  },
  {
    name: "abort",
    description: "Abort the whole run.",
    inputSchema: { type: "object", properties: { reason: { type: "string" } }, additionalProperties: false },
  },
  {
    name: "answer",
    description:
      "Answer with text: it becomes the step's output, or the reply to the person who invoked the harness while it was busy.",
    inputSchema: {
      type: "object",
      properties: { text: { type: "string" } },
      required: ["text"],
      additionalProperties: false,
    },
  },
] as const;

/**
 * Turns a manager agent's tool call into a decision.
 * @throws GraphError `MANAGER_FAILED` for an unknown tool or a bad input.
 */
export function decisionFromToolCall(name: string, input: unknown): ManagerDecision {
  const args = (typeof input === "object" && input !== null ? input : {}) as Record<string, unknown>;
  switch (name) {
    case "retry":
      return { action: "retry" };
    case "skip":
      return { action: "skip" };
    case "abort":
      return typeof args.reason === "string" ? { action: "abort", reason: args.reason } : { action: "abort" };
    case "answer":
      if (typeof args.text !== "string") {
        throw new GraphError("MANAGER_FAILED", "the manager's answer tool call has no text; it must pass { text }");
      }
      return { action: "answer", text: args.text };
    default:
      throw new GraphError(
        "MANAGER_FAILED",
        `the manager called unknown tool "${name}"; it may only call retry, skip, abort or answer`,
      );
  }
}
