// Graphs: every graph harness (the agents' name space, runtime `graph`), and
// one graph drawn from its definition with each node's stable id — the ids
// its steps' events and spans carry. With a run chosen, each node shows its
// live status (from the run's public lifecycle events), how many times it
// ran (a loop's iterations), which arms of a choice were taken, and the
// graph manager's decisions; the statuses follow the run's transcript as
// the orchestrator streams it (WatchJobTranscript). A plugin's author writes
// the definition: its ids, labels and names are shown through visibleExactly()
// (format.ts), as a tool's name is, since they decide what runs (an arm whose
// label holds a zero-width space is never the one its answer takes), so an
// override or a character a page draws as nothing is an escape, not obeyed.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { agents, jobs } from "../api.js";
import { clock, dateOf, isTerminal, json, stateName, visible, visibleExactly } from "../format.js";
import {
  childPlace,
  loopIterations,
  stateOfSteps,
  stepsAt,
  stepsBelow,
  stepStatuses,
  type Place,
  type StepStatus,
} from "../graph-status.js";
import { useJobStream } from "../job-stream.js";
import { useRead } from "../reads.js";
import { useTranscriptStream } from "../transcript-stream.js";
import { href } from "../router.js";

export function GraphsPage() {
  const list = useRead(
    (signal) => agents.listAgents({}, { signal }).then((r) => r.agents.filter((a) => a.runtime === "graph")),
    "graphs",
  );
  return (
    <section aria-labelledby="graphs-title">
      <h1 id="graphs-title">Graphs</h1>
      {list.error ? (
        <p role="alert" class="error">
          {list.error}
        </p>
      ) : null}
      {list.value === undefined ? (
        <p>Loading…</p>
      ) : list.value.length === 0 ? (
        <p>No graphs yet: a plugin lists them under `graphs:`.</p>
      ) : null}
      <ul>
        {(list.value ?? []).map((g) => (
          <li key={g.name} data-graph={g.name}>
            <a href={href({ page: "graph", name: g.name, run: "" })}>{g.name}</a> v{g.version}{" "}
            <span class="muted">
              ({visible(g.plugin)} {visible(g.pluginVersion)})
            </span>
          </li>
        ))}
      </ul>
    </section>
  );
}

type Flow = JsonObject[];

export function GraphPage({ name, run }: { name: string; run: string }) {
  const graph = useRead((signal) => agents.getAgent({ name }, { signal }).then((r) => r.agent), `graph|${name}`);
  const runs = useRead((signal) => jobs.listJobs({ agent: name, limit: 20 }, { signal }), `runs|${name}|${run}`);
  const definition = (graph.value?.definition ?? {}) as JsonObject;
  return (
    <section aria-labelledby="graph-title">
      <h1 id="graph-title">
        Graph {name}
        {graph.value ? ` v${graph.value.version}` : ""}
      </h1>
      {graph.error ? (
        <p role="alert" class="error">
          {graph.error}
        </p>
      ) : null}
      <nav aria-label="Runs" class="versions">
        Runs:{" "}
        <a href={href({ page: "graph", name, run: "" })} aria-current={run === "" ? "page" : undefined}>
          none (the definition)
        </a>
        {(runs.value?.jobs ?? []).map((j) => (
          <a
            key={j.id}
            href={href({ page: "graph", name, run: j.id })}
            aria-current={run === j.id ? "page" : undefined}
          >
            {clock(dateOf(j.createdAt))} {stateName(j.state)}
          </a>
        ))}
      </nav>
      {graph.value ? (
        run ? (
          <RunView runId={run} definition={definition} />
        ) : (
          <GraphView definition={definition} steps={undefined} ended={false} />
        )
      ) : (
        <p>Loading…</p>
      )}
    </section>
  );
}

function RunView({ runId, definition }: { runId: string; definition: JsonObject }) {
  const s = useJobStream(runId);
  const ended = s.job !== undefined && isTerminal(s.job.state);
  const transcript = useTranscriptStream(runId);
  const steps = stepStatuses(transcript.value);
  const decisions = s.events.flatMap((e) => (e.event.case === "servedToolCall" ? [e.event.value] : []));
  return (
    <>
      <p>
        Run <a href={href({ page: "job", jobId: runId })}>{runId}</a>:{" "}
        <span class={`state state-${stateName(s.job?.state ?? 0)}`} data-testid="run-state">
          {s.job ? stateName(s.job.state) : "…"}
        </span>{" "}
        <span class="muted">{s.stream === "live" ? "live" : s.stream === "reconnecting" ? "reconnecting…" : ""}</span>
      </p>
      {transcript.error ? <p class="muted">Node statuses are not shown: {transcript.error}</p> : null}
      <GraphView definition={definition} steps={steps} ended={ended} />
      {decisions.length > 0 ? (
        <>
          <h2>The manager's decisions</h2>
          <ol data-testid="decisions">
            {decisions.map((d) => (
              <li key={d.callId}>
                <code>{visibleExactly(d.tool)}</code> {json(d.input as JsonValue)}{" "}
                {d.error ? <span class="error">refused: {visible(d.error)}</span> : <span class="muted">accepted</span>}
              </li>
            ))}
          </ol>
        </>
      ) : null}
    </>
  );
}

interface Drawing {
  /** The run's steps; undefined when no run is shown. */
  steps: readonly StepStatus[] | undefined;
  ended: boolean;
  graphs: Record<string, Flow>;
  /** Subgraphs being drawn, so a cycle is named instead of followed. */
  expanding: readonly string[];
}

function GraphView({
  definition,
  steps,
  ended,
}: {
  definition: JsonObject;
  steps: readonly StepStatus[] | undefined;
  ended: boolean;
}) {
  const root = Array.isArray(definition.root) ? (definition.root as Flow) : [];
  const drawing: Drawing = { steps, ended, graphs: (definition.graphs ?? {}) as Record<string, Flow>, expanding: [] };
  return (
    <figure class="graph" aria-labelledby="graph-caption" data-testid="graph">
      <figcaption id="graph-caption">
        <code>{visibleExactly(String(definition.id ?? ""))}</code>
        {definition.managerAgent ? (
          <span class="muted"> · manager agent:{visibleExactly(String(definition.managerAgent))}</span>
        ) : null}
        {steps ? (
          <span class="muted"> · statuses live from the run's events</span>
        ) : (
          <span class="muted"> · steps run top to bottom</span>
        )}
      </figcaption>
      <FlowView flow={root} base={undefined} drawing={drawing} />
    </figure>
  );
}

/** A flow's nodes; `base` is the place of the flow itself (the root has none). */
function FlowView({ flow, base, drawing }: { flow: Flow; base: Place | undefined; drawing: Drawing }) {
  if (flow.length === 0) return <p class="muted">(nothing)</p>;
  return (
    <ol class="flow">
      {flow.map((node, i) => (
        <NodeView key={`${String(node.id)}-${i}`} node={node} place={childPlace(base, String(i))} drawing={drawing} />
      ))}
    </ol>
  );
}

function NodeView({ node, place, drawing }: { node: JsonObject; place: Place; drawing: Drawing }) {
  const id = String(node.id ?? "");
  const kind = String(node.kind ?? "");
  const steps = drawing.steps;
  const own = steps ? (kind === "agent" || kind === "step" ? stepsAt(steps, id, place) : stepsBelow(steps, place)) : [];
  const status = stateOfSteps(own);
  const badge = steps ? (
    <span class={`node-state node-${status ?? "idle"}`} data-testid="node-state">
      {status ?? (drawing.ended ? "not run" : "waiting")}
    </span>
  ) : null;
  const runs = kind === "agent" || kind === "step" ? own.reduce((n, s) => n + s.runs, 0) : 0;
  const iterations = kind === "loop" && steps ? loopIterations(steps, place) : 0;
  return (
    <li class={`node node-kind-${kind}`} data-node={id} data-status={status ?? ""}>
      <span class="node-head">
        <code>{visibleExactly(id)}</code> <span class="muted">{visibleExactly(describe(node))}</span> {badge}
        {runs > 1 ? <span class="muted"> · ran {runs} times</span> : null}
        {iterations > 0 ? <span class="muted"> · iteration {iterations}</span> : null}
      </span>
      {kind === "parallel" ? (
        <ul class="branches">
          {(node.branches as Flow[] | undefined)?.map((b, j) => (
            <li key={j}>
              <span class="muted">branch {j + 1}</span>
              <FlowView flow={b} base={childPlace(place, `b${j}`)} drawing={drawing} />
            </li>
          ))}
        </ul>
      ) : null}
      {kind === "choice" ? <ChoiceArms node={node} place={place} drawing={drawing} /> : null}
      {kind === "loop" ? (
        <ul class="branches">
          <li>
            <span class="muted">body</span>
            <FlowView
              flow={(node.body as Flow | undefined) ?? []}
              base={childPlace(place, "\\d+\\.body")}
              drawing={drawing}
            />
          </li>
          <li>
            <span class="muted">until (again or break; at most {String(node.maxIterations ?? "?")} iterations)</span>
            <FlowView
              flow={(node.until as Flow | undefined) ?? []}
              base={childPlace(place, "\\d+\\.until")}
              drawing={drawing}
            />
          </li>
        </ul>
      ) : null}
      {kind === "graph" ? <SubgraphView name={String(node.graph ?? "")} place={place} drawing={drawing} /> : null}
    </li>
  );
}

/** A choice's evaluator and arms, each arm marked taken or (once the run ended) not taken. */
function ChoiceArms({ node, place, drawing }: { node: JsonObject; place: Place; drawing: Drawing }) {
  const arms = [
    ...((node.arms as JsonObject[] | undefined) ?? []).map((a, i) => ({
      label: `when "${String(a.label)}"`,
      flow: a.flow as Flow,
      place: childPlace(place, `arm${i}`),
    })),
    ...(node.otherwise ? [{ label: "otherwise", flow: node.otherwise as Flow, place: childPlace(place, "else") }] : []),
  ];
  const evaluator = node.evaluator as JsonObject | undefined;
  return (
    <ul class="branches">
      {evaluator ? (
        <li>
          <span class="muted">evaluator</span>
          <ol class="flow">
            <NodeView node={evaluator} place={childPlace(place, "eval")} drawing={drawing} />
          </ol>
        </li>
      ) : null}
      {arms.map((arm) => {
        const taken = drawing.steps ? stepsBelow(drawing.steps, arm.place).length > 0 : undefined;
        const mark = taken ? " · taken" : taken === false && drawing.ended ? " · not taken" : "";
        return (
          <li
            key={arm.label}
            class={taken === false && drawing.ended ? "not-taken" : ""}
            data-arm={arm.label}
            data-taken={taken === undefined ? "" : String(taken)}
          >
            <span class="muted">
              {visibleExactly(arm.label)}
              {mark}
            </span>
            <FlowView flow={arm.flow} base={arm.place} drawing={drawing} />
          </li>
        );
      })}
    </ul>
  );
}

function SubgraphView({ name, place, drawing }: { name: string; place: Place; drawing: Drawing }) {
  const flow = drawing.graphs[name];
  if (!flow) return <p class="muted">(undefined subgraph {visibleExactly(name)})</p>;
  if (drawing.expanding.includes(name)) return <p class="muted">(cycle: {visibleExactly(name)})</p>;
  // A subgraph's steps sit below the graph node's own path.
  return <FlowView flow={flow} base={place} drawing={{ ...drawing, expanding: [...drawing.expanding, name] }} />;
}

function describe(node: JsonObject): string {
  switch (node.kind) {
    case "agent":
      return `agent ${String(node.agent)}`;
    case "step":
      return `step ${String(node.step)}`;
    case "parallel":
      return "branches at the same time, then join";
    case "choice":
      return node.evaluator
        ? `choice by ${String((node.evaluator as JsonObject).id)}`
        : `choice on "${String(node.key)}"`;
    case "loop":
      return "loop";
    case "graph":
      return `subgraph ${String(node.graph)}`;
    default:
      return String(node.kind ?? "");
  }
}
