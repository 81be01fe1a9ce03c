// The GraphManager a graph job runs with when its definition names a
// `managerAgent`. The engine calls it only on control events (a step error,
// a loop at maxIterations, an invoke while a run is in flight); each call
// runs the manager agent's version pinned when the run started as a job of
// its own through the job runner, exactly like an agent step (sandbox, LLM
// proxy token, metering, hooks). Its input is the event and the bag's
// redacted snapshot only: never a step's raw output or error text, which may
// hold what the redaction is there to hide. The decision tools
// (`managerTools`) are offered as runtime tools the job runner lets this
// class answer; the first valid call is the decision.
import type { JsonObject as ProtoJsonObject } from "@bufbuild/protobuf";
import type { RuntimeTool } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { decisionFromToolCall, GraphError, managerTools, type ControlEvent, type GraphManager, type ManagerDecision } from "@oz0/graph";
import { never, waitForTerminalJob } from "./graph-executor.js";
import type { JobFeed } from "./job-feed.js";
import type { JobRunner } from "./job-runner.js";
import type { JobStore } from "./job-store.js";

export interface AgentGraphManagerOptions {
  store: JobStore;
  feed: JobFeed;
  jobs: JobRunner;
  /** The definition's `managerAgent`. */
  agent: string;
  /** Its version pinned when the run started (absent: the latest). */
  version?: number;
  /** Called with the manager's job when it starts, for the graph job's events. */
  onJob?: (info: { event: ControlEvent["kind"]; jobId: string }) => void;
  /** Aborted when this replica stops working on the run: no decision is made (the call never settles). */
  halt?: AbortSignal;
  /** How often the manager's job is read from the store while waiting for it. Default 1 s. */
  pollMs?: number;
}

const RUNTIME_TOOLS: RuntimeTool[] = managerTools.map(
  (tool) =>
    ({
      $typeName: "oz0.harness.v1.RuntimeTool",
      name: tool.name,
      description: tool.description,
      inputSchema: structuredClone(tool.inputSchema) as unknown as ProtoJsonObject,
    }) as RuntimeTool,
);

/** What the manager agent sees: the event without step content, and the redacted bag. */
export function managerInput(event: ControlEvent): string {
  const facts: Record<string, unknown> = { kind: event.kind, run_id: event.runId, graph: event.graph };
  switch (event.kind) {
    case "step_error":
      Object.assign(facts, { step: event.nodeId, path: event.path, iteration: event.iteration, attempt: event.attempt, error_code: event.error.code });
      break;
    case "max_iterations":
      Object.assign(facts, { step: event.nodeId, path: event.path, iteration: event.iteration, max_iterations: event.maxIterations });
      break;
    case "invoke_in_flight":
      // The new invoke's prompt is not step content: the manager must see it to answer it.
      Object.assign(facts, { prompt: event.prompt });
      break;
  }
  return [
    `Graph ${event.graph} needs a decision: ${event.kind}.`,
    "Decide by calling exactly one of the tools retry, skip, abort or answer.",
    "",
    "Event:",
    JSON.stringify(facts, null, 2),
    "",
    "The run's bag (secrets masked):",
    JSON.stringify(event.snapshot, null, 2),
  ].join("\n");
}

export class AgentGraphManager implements GraphManager {
  readonly #o: AgentGraphManagerOptions;

  constructor(options: AgentGraphManagerOptions) {
    this.#o = options;
  }

  async decide(event: ControlEvent): Promise<ManagerDecision> {
    const o = this.#o;
    if (o.halt?.aborted) return never();
    let decision: ManagerDecision | undefined;
    const rejected: string[] = [];
    const job = await o.jobs.runAgent({
      agent: o.agent,
      input: managerInput(event),
      ...(o.version ? { version: o.version } : {}),
      callerTools: {
        tools: RUNTIME_TOOLS,
        call: ({ name, input }) => {
          if (decision) return Promise.resolve({ error: `the decision was already made (${decision.action}); end your turn` });
          try {
            decision = decisionFromToolCall(name, input);
            return Promise.resolve({ output: { decided: decision.action } });
          } catch (error) {
            // The model sees why and may call again.
            const message = (error as Error).message;
            rejected.push(message);
            return Promise.resolve({ error: message });
          }
        },
      },
    });
    o.onJob?.({ event: event.kind, jobId: job.id });
    const done = await waitForTerminalJob({ store: o.store, feed: o.feed, jobId: job.id, ...(o.halt ? { halt: o.halt } : {}), ...(o.pollMs ? { pollMs: o.pollMs } : {}) });
    if (decision) return decision;
    const why = rejected.length > 0 ? `; its calls were rejected: ${rejected.join("; ")}` : "";
    throw new GraphError(
      "MANAGER_FAILED",
      `manager agent ${o.agent} (job ${done.id}) ended ${done.state} without calling retry, skip, abort or answer${why}${done.error ? ` (${done.error})` : ""}. Make its instructions call one of those tools; see \`oz0 jobs show ${done.id}\``,
    );
  }
}
