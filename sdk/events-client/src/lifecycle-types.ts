// The one list of lifecycle event types. Producers take `LifecycleType`, so
// the compiler refuses a type that is not here; the events service's
// redaction policy is a `Record<LifecycleType, …>`, so it refuses a policy
// that misses a type or names one that is not here. What the compiler cannot
// see (a type here that no producer sends) is the test's: it collects every
// type each producer's source passes where a `LifecycleType` goes and compares
// with `sentBy` (test/producers.test.ts).
//
// Adding a type: add it here with the services that send it, add its
// allowlist to the events service's policy (the compiler asks for it), send
// it, and add its row to the events service's README (its test asks for it).

/** A service that sends lifecycle events: the `source` of its raw events and `@oz0/<source>` its package. */
export type LifecycleSource = "orchestrator" | "llm-proxy";

export interface LifecycleTypeInfo {
  /** The services that send it. */
  readonly sentBy: readonly LifecycleSource[];
  /** What it reports, in a few words. */
  readonly about: string;
}

/** Every lifecycle event type, with who sends it and what it reports. */
export const LIFECYCLE_EVENTS = {
  "job.created": { sentBy: ["orchestrator"], about: "a job was stored; its session is to start" },
  "job.completed": { sentBy: ["orchestrator"], about: "a job ended with the harness's result" },
  "job.failed": { sentBy: ["orchestrator"], about: "a job ended in failure" },
  "job.cancelled": { sentBy: ["orchestrator"], about: "a job ended because someone cancelled it" },
  "session.started": { sentBy: ["orchestrator"], about: "a job's harness process started, on the node it names" },
  "session.ended": { sentBy: ["orchestrator"], about: "a job's harness process ended, as its node reported it" },
  "tool.called": { sentBy: ["orchestrator"], about: "the harness called a tool" },
  "permission.decided": {
    sentBy: ["orchestrator"],
    about: "a hook or policy allowed or denied a tool call without a person",
  },
  "approval.requested": { sentBy: ["orchestrator"], about: "a tool call waits for a person" },
  "approval.answered": {
    sentBy: ["orchestrator"],
    about: "a waiting tool call was answered, or timed out (status `timed_out`)",
  },
  "llm.call_completed": { sentBy: ["llm-proxy"], about: "one logical model call finished, retries included" },
  "harness.operation_started": { sentBy: ["orchestrator"], about: "a harness operation began" },
  "harness.operation_step": {
    sentBy: ["orchestrator"],
    about: "one model turn or tool call inside a harness operation",
  },
  "harness.operation_completed": {
    sentBy: ["orchestrator"],
    about: "a harness operation returned a result that validated",
  },
  "harness.operation_failed": { sentBy: ["orchestrator"], about: "a harness operation failed" },
  "harness.operation_cancelled": { sentBy: ["orchestrator"], about: "a harness operation was cancelled" },
  "harness.operation_timed_out": { sentBy: ["orchestrator"], about: "a harness operation ran out of time" },
  "graph.run_started": { sentBy: ["orchestrator"], about: "a graph run began" },
  "graph.run_completed": { sentBy: ["orchestrator"], about: "a graph run succeeded" },
  "graph.run_failed": { sentBy: ["orchestrator"], about: "a graph run failed" },
  "graph.run_cancelled": { sentBy: ["orchestrator"], about: "a graph run was cancelled" },
  "graph.step_started": { sentBy: ["orchestrator"], about: "a graph step began" },
  "graph.step_completed": { sentBy: ["orchestrator"], about: "a graph step finished" },
  "graph.step_failed": { sentBy: ["orchestrator"], about: "a graph step failed" },
} as const satisfies Record<string, LifecycleTypeInfo>;

/** A lifecycle event type: one of `LIFECYCLE_EVENTS`' keys. */
export type LifecycleType = keyof typeof LIFECYCLE_EVENTS;

/** Every lifecycle event type, in the list's order. */
export const LIFECYCLE_TYPES: readonly LifecycleType[] = Object.freeze(
  Object.keys(LIFECYCLE_EVENTS) as LifecycleType[],
);

/** Whether a type that came from outside the compiler's sight (the wire, a stored event) is one of the list's. */
export function isLifecycleType(type: string): type is LifecycleType {
  return Object.hasOwn(LIFECYCLE_EVENTS, type);
}
