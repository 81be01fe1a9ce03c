/**
 * The fluent declaration API (`Harness`, `Graph`, `Step`, `agent`, `next`,
 * `parallel`, `choice`, `loop`) and its translation to a {@link GraphDefinition}.
 *
 * Every `next`-like call appends a new link to the object it is called on and
 * returns that link: chaining on the returned link sequences, calling again on
 * the same object adds a sibling that runs in parallel. Steps themselves are
 * never mutated, so one `Step` or agent can appear in many places.
 */
import {
  GRAPH_DEFINITION_FORMAT,
  slugify,
  type AgentNode,
  type ChoiceNode,
  type CustomStepNode,
  type Flow,
  type GraphDefinition,
  type LoopNode,
  type TriggerDefinition,
} from "./definition.js";
import { GraphError } from "./errors.js";
import type { HarnessContext } from "./harness-context.js";

/** What the engine passes to a custom step besides the bag. */
export interface StepRunInfo {
  runId: string;
  /** `<runId>/<step path>`; unchanged when the step is re-executed after a crash. */
  idempotencyKey: string;
  /** Loop iteration (1-based) of the innermost loop, 0 outside loops. */
  iteration: number;
  /**
   * Aborted when the run is cancelled, a sibling branch failed, or the step ran past its timeout (the reason is
   * then a `STEP_TIMED_OUT` GraphError): stop then, since nothing the step does afterwards is recorded.
   */
  signal: AbortSignal;
}

/** Anything that can be placed in a flow. */
export type StepLike = Step | AgentStep | Graph | Chain;

/** The common shape of every step: a name and a non-mutating `next`. */
export interface IStep {
  readonly name: string;
  /** Returns a new chain `this → step`; does not change `this`. */
  next(step: StepLike): Chain;
}

/** Options for a custom {@link Step}. */
export interface StepOptions {
  /**
   * Module specifier that exports the class (a plugin-relative path or a package
   * name), written into the definition so the step can be loaded by name in the
   * sandbox. Optional for steps registered in-process.
   */
  module?: string;
  /** Export name inside `module`; defaults to the class name. */
  exportName?: string;
  /** Node id override, for using the same step twice where ids would be ambiguous. */
  id?: string;
  /** How long the step may run (`90s`, `10m`, `1h30m`, at most 24h); default 10m. See {@link CustomStepNode.timeout}. */
  timeout?: string;
}

/**
 * Base class for custom steps. Subclass it, call `super(name)`, implement
 * `run`, which reads and writes the bag.
 */
export abstract class Step implements IStep {
  /** Step name; the node id is `step:<name>`. */
  public readonly name: string;
  /** Declaration options (module, export name, id). */
  public readonly options: StepOptions;

  protected constructor(name: string, options: StepOptions = {}) {
    this.name = name;
    this.options = options;
  }

  /** Does the step's work; throw to fail the step. */
  public abstract run(ctx: HarnessContext, info: StepRunInfo): Promise<void> | void;

  /** Returns a new chain `this → step` without mutating this step. */
  public next(step: StepLike): Chain {
    return startChain(this).next(step);
  }

  /** @internal */
  public toNode(): CustomStepNode {
    const node: CustomStepNode = { kind: "step", id: this.options.id ?? `step:${this.name}`, step: this.name };
    if (this.options.module !== undefined) {
      node.module = this.options.module;
      node.export = this.options.exportName ?? this.constructor.name;
    }
    if (this.options.timeout !== undefined) node.timeout = this.options.timeout;
    return node;
  }
}

/** Options for {@link AgentStep}. */
export interface AgentStepOptions {
  /** Agent name; the orchestrator resolves it to an immutable agent version. */
  agent: string;
  /** Node id override; defaults to `agent:<agent>`. */
  id?: string;
}

/** An agent used as a step, referenced by name. */
export class AgentStep implements IStep {
  public readonly name: string;
  readonly #id: string | undefined;

  public constructor(options: AgentStepOptions) {
    this.name = options.agent;
    this.#id = options.id;
  }

  /** Returns a new chain `this → step` without mutating this agent. */
  public next(step: StepLike): Chain {
    return startChain(this).next(step);
  }

  /** @internal */
  public toNode(): AgentNode {
    return { kind: "agent", id: this.#id ?? `agent:${this.name}`, agent: this.name };
  }
}

/** Shorthand for `new AgentStep({ agent: name })`. */
export function agent(name: string, options: { id?: string } = {}): AgentStep {
  return new AgentStep({ agent: name, ...options });
}

/** Anything that can be written as a trigger in the definition. */
export interface Trigger {
  toDefinition(): TriggerDefinition;
}

/** The harness can be invoked through the orchestrator's API (`oz0 run NAME "prompt"`). */
export class ApiTrigger implements Trigger {
  public toDefinition(): TriggerDefinition {
    return { type: "api" };
  }
}

type Payload =
  | { type: "step"; step: Step | AgentStep }
  | { type: "graph"; graph: Graph }
  | { type: "inline"; root: Flowable }
  | { type: "parallel"; branches: StepLike[]; failFast: boolean }
  | {
      type: "choice";
      evaluator?: Step | AgentStep;
      key: string;
      arms: { label: string; step: StepLike }[];
      otherwise?: StepLike;
    }
  | { type: "loop"; body: StepLike; until?: StepLike; maxIterations?: number };

/** Options for {@link Flowable.parallel}. */
export interface ParallelOptions {
  /** Cancel the other branch when one fails (default true). */
  failFast?: boolean;
}

/** Something steps can be appended to: a graph, a harness, or a link of a chain. */
export abstract class Flowable {
  /** @internal */
  public readonly children: Chain[] = [];
  /** @internal The graph this chain belongs to (what is placed when the chain is passed around). */
  public abstract readonly chainRoot: Flowable;

  /** Appends `step`; call again on the same object to add a parallel sibling. */
  public next(step: StepLike): Chain {
    return this.#append(payloadOf(step));
  }

  /** Runs `left` and `right` at the same time, joins them, and returns the join. */
  public parallel(left: StepLike, right: StepLike, options: ParallelOptions = {}): Chain {
    return this.#append({ type: "parallel", branches: [left, right], failFast: options.failFast ?? true });
  }

  /** Runs `evaluator`, then the arm whose label equals the `choice` it set. */
  public choice(evaluator: Step | AgentStep): ChoiceBuilder {
    const link = new ChoiceBuilder(this.chainRoot, { type: "choice", evaluator, key: "choice", arms: [] });
    this.children.push(link);
    return link;
  }

  /** Branches on an existing bag key, with no extra step. */
  public choiceKey(key: string): ChoiceBuilder {
    const link = new ChoiceBuilder(this.chainRoot, { type: "choice", key, arms: [] });
    this.children.push(link);
    return link;
  }

  /** Repeats `body`; finish with `.until(terminal).maxIterations(n)`. */
  public loop(body: StepLike): LoopBuilder {
    const link = new LoopBuilder(this.chainRoot, { type: "loop", body });
    this.children.push(link);
    return link;
  }

  #append(payload: Payload): Chain {
    const link = new Chain(this.chainRoot, payload);
    this.children.push(link);
    return link;
  }
}

/** A link in a chain; `next` on it sequences after it. */
export class Chain extends Flowable implements IStep {
  public readonly chainRoot: Flowable;
  /** @internal */
  public readonly payload: Payload;

  /** @internal Use `next`, `parallel`, `choice` or `loop` to create links. */
  public constructor(chainRoot: Flowable, payload: Payload) {
    super();
    this.chainRoot = chainRoot;
    this.payload = payload;
  }

  /** The name of what this link runs. */
  public get name(): string {
    const p = this.payload;
    switch (p.type) {
      case "step":
        return p.step.name;
      case "graph":
        return p.graph.name;
      default:
        return p.type;
    }
  }
}

/** Returned by `choice` / `choiceKey`: add arms, then `next` continues after the chosen arm. */
export class ChoiceBuilder extends Chain {
  /** Runs `step` when the label equals `label`; the first matching arm wins. */
  public when(label: string, step: StepLike): this {
    this.#choice().arms.push({ label, step });
    return this;
  }

  /** Runs `step` for any other label (named so because `else` is reserved in Python). */
  public otherwise(step: StepLike): this {
    this.#choice().otherwise = step;
    return this;
  }

  #choice(): Extract<Payload, { type: "choice" }> {
    return this.payload as Extract<Payload, { type: "choice" }>;
  }
}

/** Returned by `loop`: `until` and `maxIterations` are both required. */
export class LoopBuilder extends Chain {
  /** The terminal step: it sets `choice` to `again` or `break` (and may leave `feedback`). */
  public until(terminal: StepLike): this {
    this.#loop().until = terminal;
    return this;
  }

  /** The most body+terminal rounds; reaching it is a control event. Must be at least 1. */
  public maxIterations(n: number): this {
    this.#loop().maxIterations = n;
    return this;
  }

  #loop(): Extract<Payload, { type: "loop" }> {
    return this.payload as Extract<Payload, { type: "loop" }>;
  }
}

/** Options for {@link Graph}. */
export interface GraphOptions {
  /** Version label written into the definition. */
  version?: string;
}

/** A named subgraph: the same fluent API as a harness, without triggers. */
export class Graph extends Flowable {
  public readonly name: string;
  public readonly chainRoot: Flowable = this;
  protected readonly graphOptions: GraphOptions;

  public constructor(name: string, options: GraphOptions = {}) {
    super();
    if (name.trim() === "") {
      throw new GraphError("INVALID_DECLARATION", "a graph needs a non-empty name; pass it to new Graph(name)");
    }
    this.name = name;
    this.graphOptions = options;
  }

  /** The serialisable definition of this graph (not validated; see `validateDefinition`). */
  public toDefinition(): GraphDefinition {
    return buildDefinition(this, "graph");
  }
}

/** Options for {@link Harness}. */
export interface HarnessProps extends GraphOptions {
  triggers?: Trigger[];
  /** Agent invoked only on control events (step error, max iterations, in-flight invoke). */
  managerAgent?: string | AgentStep;
  /** Bag keys masked in every snapshot the engine hands out (the manager agent's view). */
  secretKeys?: string[];
}

/** A runnable, named graph with optional triggers and manager agent. */
export class Harness extends Graph {
  public readonly props: HarnessProps;

  public constructor(name: string, props: HarnessProps = {}) {
    super(name, props);
    this.props = props;
  }

  public override toDefinition(): GraphDefinition {
    return buildDefinition(this, "harness");
  }
}

/** An anonymous root for chains started from a step (`a.next(b)`), spliced inline where placed. */
class AnonymousRoot extends Flowable {
  public readonly chainRoot: Flowable = this;
}

function startChain(step: Step | AgentStep): Chain {
  return new AnonymousRoot().next(step);
}

function payloadOf(step: StepLike): Payload {
  if (step instanceof Step || step instanceof AgentStep) return { type: "step", step };
  if (step instanceof Graph) return { type: "graph", graph: step };
  if (step instanceof Chain) {
    const root = step.chainRoot;
    return root instanceof Graph ? { type: "graph", graph: root } : { type: "inline", root };
  }
  throw new GraphError(
    "INVALID_DECLARATION",
    "a step must be a Step subclass, an agent(...) / AgentStep, a Graph or a chain returned by next(); lambdas are not steps",
  );
}

function buildDefinition(graph: Graph, kind: "harness" | "graph"): GraphDefinition {
  const graphs: Record<string, Flow> = {};
  const seen = new Map<string, Graph>();
  const building: string[] = [];

  const refGraph = (g: Graph): Flow => {
    const known = seen.get(g.name);
    if (known !== undefined && known !== g) {
      throw new GraphError(
        "INVALID_DECLARATION",
        `two different graphs are named "${g.name}"; give each subgraph a unique name`,
      );
    }
    if (building.includes(g.name)) {
      // Written as a reference so the validator reports the cycle with its path.
      return [{ kind: "graph", id: `graph:${slugify(g.name)}`, graph: g.name }];
    }
    if (known === undefined) {
      seen.set(g.name, g);
      building.push(g.name);
      graphs[g.name] = flowOf(g);
      building.pop();
    }
    return [{ kind: "graph", id: `graph:${slugify(g.name)}`, graph: g.name }];
  };

  const stepLikeFlow = (s: StepLike): Flow => payloadFlow(payloadOf(s));

  const payloadFlow = (p: Payload): Flow => {
    switch (p.type) {
      case "step":
        return [p.step.toNode()];
      case "graph":
        return refGraph(p.graph);
      case "inline":
        return flowOf(p.root);
      case "parallel":
        return [
          {
            kind: "parallel",
            id: `parallel:${p.branches.map(nameOf).join("+")}`,
            branches: p.branches.map(stepLikeFlow),
            ...(p.failFast ? {} : { failFast: false }),
          },
        ];
      case "choice": {
        const node: ChoiceNode = {
          kind: "choice",
          id: p.evaluator ? `choice:${p.evaluator.name}` : `choice-key:${p.key}`,
          key: p.key,
          arms: p.arms.map((a) => ({ label: a.label, flow: stepLikeFlow(a.step) })),
        };
        if (p.evaluator) node.evaluator = p.evaluator.toNode();
        if (p.otherwise !== undefined) node.otherwise = stepLikeFlow(p.otherwise);
        return [node];
      }
      case "loop": {
        const node: LoopNode = { kind: "loop", id: `loop:${nameOf(p.body)}`, body: stepLikeFlow(p.body) };
        if (p.until !== undefined) node.until = stepLikeFlow(p.until);
        if (p.maxIterations !== undefined) node.maxIterations = p.maxIterations;
        return [node];
      }
    }
  };

  const flowOf = (f: Flowable): Flow => {
    if (f.children.length === 0) return [];
    if (f.children.length === 1) return linkFlow(f.children[0] as Chain);
    return [
      {
        kind: "parallel",
        id: `parallel:${f.children.map((c) => c.name).join("+")}`,
        branches: f.children.map(linkFlow),
      },
    ];
  };

  const linkFlow = (link: Chain): Flow => [...payloadFlow(link.payload), ...flowOf(link)];

  seen.set(graph.name, graph);
  building.push(graph.name);
  const root = flowOf(graph);
  const def: GraphDefinition = {
    format: GRAPH_DEFINITION_FORMAT,
    kind,
    name: graph.name,
    id: `${kind}:${slugify(graph.name)}`,
    root,
  };
  const options = (graph as unknown as { graphOptions: GraphOptions }).graphOptions;
  if (options.version !== undefined) def.version = options.version;
  if (graph instanceof Harness) {
    const m = graph.props.managerAgent;
    if (m !== undefined) def.managerAgent = typeof m === "string" ? m : m.name;
    if (graph.props.secretKeys !== undefined) def.secretKeys = [...graph.props.secretKeys];
    if (graph.props.triggers !== undefined) def.triggers = graph.props.triggers.map((t) => t.toDefinition());
  }
  if (Object.keys(graphs).length > 0) def.graphs = graphs;
  return def;
}

/** The name a placed step is known by: a chain placed anywhere stands for its named graph. */
function nameOf(s: StepLike): string {
  if (s instanceof Chain && s.chainRoot instanceof Graph) return s.chainRoot.name;
  return s.name;
}
