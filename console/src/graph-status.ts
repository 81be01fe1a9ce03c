// A graph run's steps, from the public lifecycle events of its transcript
// (`graph.step_started`, `…_completed`, `…_failed`, whose step id is
// `<node id>@<path>`, the path dotted: `0.b1.0`, `0.arm2.0`, `0.3.body.0`).
// The drawing knows each node's path pattern (a loop's iteration is any
// number), so a node id used in several places (one agent in every arm of a
// choice) shows each place's own status. Pure.
import type { PublicEvent, TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";

export type NodeState = "running" | "completed" | "failed";

export interface StepStatus {
  nodeId: string;
  /** Dotted, e.g. `0.b1.0`. */
  path: string;
  state: NodeState;
  /** Times this step started (a retried step starts again at the same path). */
  runs: number;
  /** The position of its last event among all of the run's, so later beats earlier. */
  last: number;
}

/** Each step of the run by its step id, in the order they first started. */
export function stepStatuses(transcript: TranscriptResponse | undefined): StepStatus[] {
  const steps = new Map<string, StepStatus>();
  let index = 0;
  for (const row of transcript?.rows ?? []) {
    if (row.row.case !== "event") continue;
    const event = row.row.value;
    const state = stateOf(event);
    if (!state || !event.graphStepId) continue;
    const at = event.graphStepId.lastIndexOf("@");
    const nodeId = at < 0 ? event.graphStepId : event.graphStepId.slice(0, at);
    const path = at < 0 ? "" : event.graphStepId.slice(at + 1);
    const step = steps.get(event.graphStepId) ?? { nodeId, path, state, runs: 0, last: 0 };
    step.state = state;
    step.last = index++;
    if (event.type === "graph.step_started") step.runs++;
    steps.set(event.graphStepId, step);
  }
  return [...steps.values()];
}

/** A drawn node's place: its path as a pattern (`\d+` for a loop's iteration). */
export interface Place {
  /** Regular-expression source matching the node's own dotted path. */
  pattern: string;
}

/** The place of the `index`th node of a flow whose own place is `base` (root: undefined). */
export function childPlace(base: Place | undefined, segment: string): Place {
  return { pattern: base ? `${base.pattern}\\.${segment}` : segment };
}

/** The steps at this very place, for this node id. */
export function stepsAt(steps: readonly StepStatus[], nodeId: string, place: Place): StepStatus[] {
  const re = new RegExp(`^${place.pattern}$`);
  return steps.filter((s) => s.nodeId === nodeId && re.test(s.path));
}

/** The steps anywhere below this place (inside a container node). */
export function stepsBelow(steps: readonly StepStatus[], place: Place): StepStatus[] {
  const re = new RegExp(`^${place.pattern}\\.`);
  return steps.filter((s) => re.test(s.path));
}

/** What a set of steps says of the node they belong to: failed, else running, else the latest's state. */
export function stateOfSteps(steps: readonly StepStatus[]): NodeState | undefined {
  if (steps.length === 0) return undefined;
  if (steps.some((s) => s.state === "failed")) return "failed";
  if (steps.some((s) => s.state === "running")) return "running";
  return "completed";
}

/** How many iterations of the loop at `place` ran (its paths are `<place>.<iteration>.body|until…`). */
export function loopIterations(steps: readonly StepStatus[], place: Place): number {
  const re = new RegExp(`^${place.pattern}\\.(\\d+)\\.`);
  const seen = new Set<string>();
  for (const s of steps) {
    const m = re.exec(s.path);
    if (m) seen.add(m[1]!);
  }
  return seen.size;
}

function stateOf(event: PublicEvent): NodeState | undefined {
  switch (event.type) {
    case "graph.step_started":
      return "running";
    case "graph.step_completed":
      return "completed";
    case "graph.step_failed":
      return "failed";
    default:
      return undefined;
  }
}
