// A graph run's node statuses, from the public lifecycle events of its
// transcript (`graph.step_started`, `…_completed`, `…_failed`, whose step id
// is `<node id>@<path>`): the latest status of each node, how many times it
// ran (a loop's iterations, a retried step's attempts), and, once the run is
// over, which nodes never ran (a choice's arms not taken). Pure.
import type { PublicEvent, TranscriptResponse } from "@oz0/proto/oz0/events/v1/events_pb";

export type NodeState = "running" | "completed" | "failed";

export interface NodeStatus {
  state: NodeState;
  /** Times the node started in this run. */
  runs: number;
  /** The highest loop iteration it ran in (1-based; 0 outside loops). */
  iteration: number;
  /** Its last step path, e.g. `0.b1.0`. */
  path: string;
}

export function nodeStatuses(transcript: TranscriptResponse | undefined): Map<string, NodeStatus> {
  const statuses = new Map<string, NodeStatus>();
  for (const row of transcript?.rows ?? []) {
    if (row.row.case !== "event") continue;
    const event = row.row.value;
    const state = stateOf(event.type);
    if (!state || !event.graphStepId) continue;
    const at = event.graphStepId.lastIndexOf("@");
    const nodeId = at < 0 ? event.graphStepId : event.graphStepId.slice(0, at);
    const path = at < 0 ? "" : event.graphStepId.slice(at + 1);
    const known = statuses.get(nodeId) ?? { state, runs: 0, iteration: 0, path };
    known.state = state;
    known.path = path;
    if (event.type === "graph.step_started") known.runs++;
    known.iteration = Math.max(known.iteration, iterationOf(event));
    statuses.set(nodeId, known);
  }
  return statuses;
}

function stateOf(type: string): NodeState | undefined {
  switch (type) {
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

function iterationOf(event: PublicEvent): number {
  const value = event.attributes?.iteration;
  return typeof value === "number" ? value : 0;
}
