/**
 * The serialisable form of a graph harness. The fluent API produces it, the
 * YAML form parses to it, the validator checks it and the engine runs it:
 * nothing else is needed to run a graph, so it can be stored and versioned.
 */

/** Format tag written into every definition, bumped on incompatible change. */
export const GRAPH_DEFINITION_FORMAT = "oz0.graph/v1";

/** How long a custom step may run when its node sets no `timeout` (the runner's `customStepTimeoutMs` overrides). */
export const DEFAULT_CUSTOM_STEP_TIMEOUT = "10m";

/** The longest `timeout` a custom step may have: past it a timer could not hold it (and no step should need it). */
export const MAX_CUSTOM_STEP_TIMEOUT = "24h";

/** `90s`, `10m`, `1h30m` → milliseconds; undefined when `text` is no such duration. */
export function durationMs(text: string): number | undefined {
  const match = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text);
  if (!match || text === "") return undefined;
  const [, h, m, s] = match;
  return ((Number(h ?? 0) * 60 + Number(m ?? 0)) * 60 + Number(s ?? 0)) * 1000;
}

/** An agent invoked as a step; the orchestrator resolves `agent` to an immutable agent version. */
export interface AgentNode {
  kind: "agent";
  /** Stable node id, `agent:<name>` unless overridden. */
  id: string;
  /** Agent name (one name space with graphs). */
  agent: string;
}

/** A custom step, referenced by name and the module that exports it. */
export interface CustomStepNode {
  kind: "step";
  /** Stable node id, `step:<name>` unless overridden. */
  id: string;
  /** Step name, as passed to `super(name)`. */
  step: string;
  /** Module specifier that exports the step class (a plugin path or package), when known. */
  module?: string;
  /** Export name of the class in `module`. */
  export?: string;
  /**
   * How long the step may run before it fails with `STEP_TIMED_OUT` (its signal aborts, and the manager's retry
   * applies as to any failure): a duration such as `90s`, `10m` or `1h30m`, the form of an agent's
   * `limits.timeout`, at most 24h. Default {@link DEFAULT_CUSTOM_STEP_TIMEOUT}.
   */
  timeout?: string;
}

/** Branches that run at the same time and join before the next node. */
export interface ParallelNode {
  kind: "parallel";
  id: string;
  branches: Flow[];
  /**
   * When true (the default) a failing branch cancels its siblings; when false
   * the siblings finish before the parallel node fails.
   */
  failFast?: boolean;
}

/** One arm of a choice. */
export interface ChoiceArm {
  label: string;
  flow: Flow;
}

/** Runs an evaluator (or reads a bag key) and then the first arm whose label matches. */
export interface ChoiceNode {
  kind: "choice";
  id: string;
  /** Evaluator step; absent for `choiceKey`. */
  evaluator?: AgentNode | CustomStepNode;
  /** Bag key holding the label; `choice` when an evaluator is used. */
  key: string;
  arms: ChoiceArm[];
  otherwise?: Flow;
}

/** Repeats `body` then `until` while `until` sets `choice` to `again`. */
export interface LoopNode {
  kind: "loop";
  id: string;
  body: Flow;
  /** Required at publish time; optional here so the validator can name its absence. */
  until?: Flow;
  /** Required at publish time, at least 1. */
  maxIterations?: number;
}

/** A reference to a named subgraph in {@link GraphDefinition.graphs}. */
export interface GraphRefNode {
  kind: "graph";
  /** `graph:<name>`. */
  id: string;
  graph: string;
}

/** Any node of a flow. */
export type GraphNode = AgentNode | CustomStepNode | ParallelNode | ChoiceNode | LoopNode | GraphRefNode;

/** A sequence of nodes, run in order. */
export type Flow = GraphNode[];

/** A trigger that activates the harness; interpreted by the orchestrator. */
export interface TriggerDefinition {
  type: string;
  [option: string]: unknown;
}

/** A complete, serialisable graph harness. */
export interface GraphDefinition {
  format: typeof GRAPH_DEFINITION_FORMAT;
  /** `harness` for a runnable harness, `graph` for a named subgraph published on its own. */
  kind: "harness" | "graph";
  name: string;
  /** `harness:<slug>` or `graph:<slug>`. */
  id: string;
  /** Optional version label; the engine pins runs to the definition hash either way. */
  version?: string;
  /** Agent invoked only on control events. */
  managerAgent?: string;
  /**
   * Bag keys whose values never leave the engine in a snapshot (the manager
   * agent's view): each is shown as `[secret]`. Steps still read them.
   */
  secretKeys?: string[];
  triggers?: TriggerDefinition[];
  root: Flow;
  /** Named subgraphs referenced by `graph` nodes. */
  graphs?: Record<string, Flow>;
}

/**
 * The definition's subgraphs by name, own entries only. `graphs` is a plain
 * object read from YAML or JSON: looked up directly, a reference to
 * "constructor" or "toString" found Object.prototype's function and was taken
 * for a defined subgraph.
 */
export function subgraphsOf(definition: GraphDefinition): Record<string, Flow> {
  return Object.assign(Object.create(null) as Record<string, Flow>, definition.graphs);
}

/** Lower-case, dash-separated form of a name, used in `harness:<slug>` ids. */
export function slugify(name: string): string {
  return name
    .trim()
    .toLowerCase()
    .replace(/[^a-z0-9._/-]+/g, "-")
    .replace(/^-+|-+$/g, "");
}
