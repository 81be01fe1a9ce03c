/**
 * Publish-time validation: the checks a schema cannot express. The
 * orchestrator calls it with the agent and step names it knows, so a graph
 * that could never run is refused before anyone invokes it.
 */
import {
  durationMs,
  MAX_CUSTOM_STEP_TIMEOUT,
  subgraphsOf,
  type Flow,
  type GraphDefinition,
  type GraphNode,
} from "./definition.js";
import { parseDefinition } from "./definition-schema.js";
import { GraphValidationError, type DefinitionProblem } from "./errors.js";

/** How many subgraph references may be inside each other (a graph referring to one that refers to another...). */
export const MAX_SUBGRAPH_NESTING = 32;

/** How many nodes a graph may have with its subgraph references expanded (each reference counts its subgraph's). */
export const MAX_GRAPH_NODES = 10_000;

/** Options for {@link validateDefinition}. */
export interface ValidateOptions {
  /** Agent names that resolve; when absent, agent names are not checked. */
  knownAgents?: Iterable<string>;
  /** Custom step names that resolve; when absent, step names are not checked. */
  knownSteps?: Iterable<string>;
  /**
   * The most branches one parallel node may have; when absent, not checked. A runner starts every branch at
   * once, so an orchestrator that runs each step as a job sets it (and `maxConcurrentSteps`).
   */
  maxParallelBranches?: number;
  /**
   * The most steps one run may have running at once, nested parallels multiplied (each branch counts its widest
   * point); when absent, not checked.
   */
  maxConcurrentSteps?: number;
}

/** Result of {@link validateDefinition}. */
export type ValidationResult =
  { ok: true; definition: GraphDefinition; problems: [] } | { ok: false; problems: DefinitionProblem[] };

interface Occurrence {
  id: string;
  where: string;
  /** Choice arms on the way here, as `<choice position>#<arm>`; different arms of one choice never both run. */
  arms: string[];
}

/**
 * Validates a definition (or any value claimed to be one): schema first, then
 * loops, choices, unknown agents and steps, graph references and cycles, and
 * node ids that would be ambiguous on events.
 */
export function validateDefinition(value: unknown, options: ValidateOptions = {}): ValidationResult {
  let def: GraphDefinition;
  try {
    def = parseDefinition(value);
  } catch (e) {
    if (e instanceof GraphValidationError) return { ok: false, problems: [...e.problems] };
    throw e;
  }
  const problems: DefinitionProblem[] = [];
  const agents = options.knownAgents ? new Set(options.knownAgents) : null;
  const steps = options.knownSteps ? new Set(options.knownSteps) : null;
  const graphs = subgraphsOf(def);

  if (def.managerAgent !== undefined && agents && !agents.has(def.managerAgent)) {
    problems.push({
      code: "UNKNOWN_AGENT",
      path: "/managerAgent",
      message: `manager agent "${def.managerAgent}" is not a known agent; publish the agent first or fix the name`,
    });
  }

  // Structural checks, once per written node.
  const checkFlow = (flow: Flow, at: string): void => flow.forEach((n, i) => checkNode(n, `${at}/${i}`));
  const checkNode = (node: GraphNode, at: string): void => {
    switch (node.kind) {
      case "agent":
        if (agents && !agents.has(node.agent)) {
          problems.push({
            code: "UNKNOWN_AGENT",
            path: `${at}/agent`,
            message: `agent "${node.agent}" is not a known agent; publish the agent first or fix the name`,
          });
        }
        return;
      case "step":
        if (steps && !steps.has(node.step)) {
          problems.push({
            code: "UNKNOWN_STEP",
            path: `${at}/step`,
            message: `custom step "${node.step}" is not provided by any installed plugin; install the plugin that exports it or fix the name`,
          });
        }
        if (node.timeout !== undefined) {
          const ms = durationMs(node.timeout);
          if (ms === undefined || ms <= 0 || ms > (durationMs(MAX_CUSTOM_STEP_TIMEOUT) as number)) {
            problems.push({
              code: "STEP_TIMEOUT_INVALID",
              path: `${at}/timeout`,
              message: `custom step "${node.step}" has timeout ${JSON.stringify(node.timeout)}; give a duration above 0 and at most ${MAX_CUSTOM_STEP_TIMEOUT}, such as 90s, 10m or 1h30m`,
            });
          }
        }
        return;
      case "graph":
        if (!(node.graph in graphs) && node.graph !== def.name) {
          problems.push({
            code: "UNKNOWN_GRAPH",
            path: `${at}/graph`,
            message: `subgraph "${node.graph}" is not defined under /graphs; add it or fix the name`,
          });
        }
        return;
      case "parallel":
        node.branches.forEach((b, i) => checkFlow(b, `${at}/branches/${i}`));
        return;
      case "choice": {
        if (node.evaluator) checkNode(node.evaluator, `${at}/evaluator`);
        if (node.arms.length === 0) {
          problems.push({
            code: "CHOICE_NO_ARMS",
            path: `${at}/arms`,
            message: `choice "${node.id}" has no arms; add at least one .when(label, step)`,
          });
        }
        const labels = new Set<string>();
        node.arms.forEach((arm, i) => {
          if (labels.has(arm.label)) {
            problems.push({
              code: "CHOICE_DUPLICATE_LABEL",
              path: `${at}/arms/${i}/label`,
              message: `label "${arm.label}" is already used by an earlier arm, so this arm can never run; remove it or change the label`,
            });
          }
          labels.add(arm.label);
          checkFlow(arm.flow, `${at}/arms/${i}/flow`);
        });
        if (node.otherwise) checkFlow(node.otherwise, `${at}/otherwise`);
        return;
      }
      case "loop":
        if (node.until === undefined || node.until.length === 0) {
          problems.push({
            code: "LOOP_MISSING_UNTIL",
            path: `${at}/until`,
            message: `loop "${node.id}" has no terminal step; add .until(step) that sets choice to "again" or "break"`,
          });
        }
        if (node.maxIterations === undefined) {
          problems.push({
            code: "LOOP_MISSING_MAX_ITERATIONS",
            path: `${at}/maxIterations`,
            message: `loop "${node.id}" has no iteration limit; add .maxIterations(n) with n >= 1`,
          });
        } else if (!Number.isInteger(node.maxIterations) || node.maxIterations < 1) {
          problems.push({
            code: "LOOP_MAX_ITERATIONS_INVALID",
            path: `${at}/maxIterations`,
            message: `loop "${node.id}" has maxIterations ${node.maxIterations}; it must be an integer >= 1`,
          });
        }
        if (node.body.length === 0) {
          problems.push({
            code: "LOOP_EMPTY_BODY",
            path: `${at}/body`,
            message: `loop "${node.id}" has an empty body; give loop(...) at least one step`,
          });
        }
        checkFlow(node.body, `${at}/body`);
        if (node.until) checkFlow(node.until, `${at}/until`);
        return;
    }
  };
  checkFlow(def.root, "/root");
  for (const [name, flow] of Object.entries(graphs)) checkFlow(flow, `/graphs/${escapePointer(name)}`);

  // The checks below follow references, recursively and expanding each: bounded first, or a long chain of
  // references overflowed the stack and a few subgraphs each referred to twice expanded exponentially.
  const bounds = referenceBounds(def);
  if (bounds.some((p) => p.code === "SUBGRAPHS_TOO_DEEP")) return { ok: false, problems: [...problems, ...bounds] };

  // Cycles: a graph reference that leads back to itself repeats steps with no
  // bound; only loop(...) may repeat.
  const refsOf = (flow: Flow): { graph: string; at: string }[] => {
    const out: { graph: string; at: string }[] = [];
    walkNodes(flow, "", (n, at) => {
      if (n.kind === "graph") out.push({ graph: n.graph, at });
    });
    return out;
  };
  const state = new Map<string, "visiting" | "done">();
  const reported = new Set<string>();
  const visit = (name: string, flow: Flow, base: string, stack: string[]): void => {
    state.set(name, "visiting");
    for (const ref of refsOf(flow)) {
      const target = ref.graph === def.name && !(ref.graph in graphs) ? def.name : ref.graph;
      const targetFlow = target === def.name && !(target in graphs) ? def.root : graphs[target];
      if (targetFlow === undefined) continue;
      if (state.get(target) === "visiting") {
        const cycle = [...stack.slice(stack.indexOf(target)), target].join(" → ");
        if (!reported.has(cycle)) {
          reported.add(cycle);
          problems.push({
            code: "GRAPH_CYCLE",
            path: `${base}${ref.at}/graph`,
            message: `graph references form a cycle (${cycle}) outside a loop; use loop(body).until(step).maxIterations(n) to repeat steps`,
          });
        }
      } else if (state.get(target) !== "done") {
        visit(target, targetFlow, target === def.name ? "/root" : `/graphs/${escapePointer(target)}`, [
          ...stack,
          target,
        ]);
      }
    }
    state.set(name, "done");
  };
  visit(def.name, def.root, "/root", [def.name]);

  if (reported.size === 0) {
    // It expands every reference: only for a graph of bounded size.
    if (bounds.length === 0) problems.push(...duplicateIds(def));
    // Only without cycles: a subgraph reference is as wide as its subgraph.
    problems.push(...tooWide(def, options));
  }
  problems.push(...bounds);

  return problems.length === 0 ? { ok: true, definition: def, problems: [] } : { ok: false, problems };
}

/**
 * Subgraph references nested more than {@link MAX_SUBGRAPH_NESTING} deep, or expanding to more than
 * {@link MAX_GRAPH_NODES} nodes. Each subgraph is measured once (its nodes and how deep references nest inside
 * it, memoised) and the walk stops at the nesting limit, so this neither recurses without bound nor expands
 * anything. A reference back into the chain being measured is a cycle, left to the cycle check.
 */
function referenceBounds(def: GraphDefinition): DefinitionProblem[] {
  const graphs = subgraphsOf(def);
  const measured = new Map<string, { nodes: number; nesting: number }>();
  const chain: string[] = [def.name];
  let tooDeep: DefinitionProblem | undefined;
  const measure = (flow: Flow, where: string): { nodes: number; nesting: number } => {
    let nodes = 0;
    let nesting = 0;
    walkNodes(flow, where, (n, at) => {
      nodes++;
      if (n.kind !== "graph") return;
      const inner = referenced(n.graph, at);
      nodes += inner.nodes;
      nesting = Math.max(nesting, inner.nesting);
    });
    return { nodes, nesting };
  };
  const referenced = (name: string, at: string): { nodes: number; nesting: number } => {
    const none = { nodes: 0, nesting: 0 };
    if (tooDeep || chain.includes(name)) return none;
    const flow = graphs[name] ?? (name === def.name ? def.root : undefined);
    if (flow === undefined) return none;
    const known = measured.get(name);
    // References nested here: those on the chain, this one, and the deepest inside it.
    if (chain.length + (known?.nesting ?? 0) > MAX_SUBGRAPH_NESTING) {
      tooDeep = {
        code: "SUBGRAPHS_TOO_DEEP",
        path: at,
        message: `subgraph references nest more than ${MAX_SUBGRAPH_NESTING} deep (${[...chain, name].join(" → ")}${known ? " → …" : ""}); a graph may reference subgraphs at most ${MAX_SUBGRAPH_NESTING} deep, so put some of their steps into the graph that refers to them`,
      };
      return none;
    }
    if (known) return { nodes: known.nodes, nesting: known.nesting + 1 };
    chain.push(name);
    const inside = measure(flow, name in graphs ? `/graphs/${escapePointer(name)}` : "/root");
    chain.pop();
    measured.set(name, inside);
    return { nodes: inside.nodes, nesting: inside.nesting + 1 };
  };
  const { nodes } = measure(def.root, "/root");
  if (tooDeep) return [tooDeep];
  if (nodes <= MAX_GRAPH_NODES) return [];
  return [
    {
      code: "GRAPH_TOO_LARGE",
      path: "/root",
      message: `with its subgraph references expanded, this graph has more than ${MAX_GRAPH_NODES} nodes; a graph may have at most ${MAX_GRAPH_NODES}, so refer to fewer subgraphs more than once`,
    },
  ];
}

/**
 * Like {@link validateDefinition} but throws.
 * @throws GraphValidationError listing every problem.
 */
export function assertValidDefinition(value: unknown, options: ValidateOptions = {}): GraphDefinition {
  const result = validateDefinition(value, options);
  if (!result.ok) throw new GraphValidationError(result.problems);
  return result.definition;
}

function escapePointer(s: string): string {
  return s.replace(/~/g, "~0").replace(/\//g, "~1");
}

/** Visits every node written in `flow` (not following graph references). */
function walkNodes(flow: Flow, at: string, fn: (n: GraphNode, at: string) => void): void {
  flow.forEach((n, i) => {
    const here = `${at}/${i}`;
    fn(n, here);
    switch (n.kind) {
      case "parallel":
        n.branches.forEach((b, j) => walkNodes(b, `${here}/branches/${j}`, fn));
        break;
      case "choice":
        if (n.evaluator) fn(n.evaluator, `${here}/evaluator`);
        n.arms.forEach((a, j) => walkNodes(a.flow, `${here}/arms/${j}/flow`, fn));
        if (n.otherwise) walkNodes(n.otherwise, `${here}/otherwise`, fn);
        break;
      case "loop":
        walkNodes(n.body, `${here}/body`, fn);
        if (n.until) walkNodes(n.until, `${here}/until`, fn);
        break;
      default:
        break;
    }
  });
}

/**
 * Two step nodes with one id are ambiguous when both can run in one run
 * (events and spans could not tell them apart); in different arms of one
 * choice only one ever runs, so reuse there is fine (the seed's triage
 * example sends every arm to the same writer).
 */
function duplicateIds(def: GraphDefinition): DefinitionProblem[] {
  const occurrences: Occurrence[] = [];
  const graphs = subgraphsOf(def);
  const expand = (flow: Flow, at: string, arms: string[]): void => {
    flow.forEach((n, i) => {
      const here = `${at}/${i}`;
      switch (n.kind) {
        case "agent":
        case "step":
          occurrences.push({ id: n.id, where: here, arms });
          break;
        case "graph": {
          const target = graphs[n.graph];
          if (target) expand(target, `${here} → /graphs/${escapePointer(n.graph)}`, arms);
          break;
        }
        case "parallel":
          n.branches.forEach((b, j) => expand(b, `${here}/branches/${j}`, arms));
          break;
        case "choice":
          if (n.evaluator) occurrences.push({ id: n.evaluator.id, where: `${here}/evaluator`, arms });
          n.arms.forEach((a, j) => expand(a.flow, `${here}/arms/${j}/flow`, [...arms, `${here}#${j}`]));
          if (n.otherwise) expand(n.otherwise, `${here}/otherwise`, [...arms, `${here}#otherwise`]);
          break;
        case "loop":
          expand(n.body, `${here}/body`, arms);
          if (n.until) expand(n.until, `${here}/until`, arms);
          break;
      }
    });
  };
  expand(def.root, "/root", []);
  const problems: DefinitionProblem[] = [];
  const byId = new Map<string, Occurrence[]>();
  for (const o of occurrences) {
    const list = byId.get(o.id);
    if (list) list.push(o);
    else byId.set(o.id, [o]);
  }
  for (const [id, list] of byId) {
    const earlier = new ArmTree();
    for (const b of list) {
      const a = earlier.runsWith(b);
      if (a)
        problems.push({
          code: "DUPLICATE_NODE_ID",
          path: b.where,
          message: `node id "${id}" is also used at ${a.where} and both can run in one run, so events would be ambiguous; give one its own id (agent("name", { id }) or the step's id option)`,
        });
      earlier.add(b);
    }
  }
  return problems;
}

/** The choice of an arm entry (`<choice position>#<arm>`). */
const choiceOf = (arm: string): string => arm.slice(0, arm.lastIndexOf("#"));

interface ArmTreeNode {
  /** The first occurrence whose arms end here. */
  endsHere?: Occurrence;
  /** The first occurrence at or below here. */
  first?: Occurrence;
  /** The first occurrences below here under each of the first two choices met (the earliest two). */
  byChoice: Array<{ choice: string; first: Occurrence }>;
  children: Map<string, ArmTreeNode>;
}

/**
 * One node id's occurrences so far, by the choice arms on their way. Two occurrences never both run when, where
 * their arms first differ, they lie in different arms of one choice (arms nest from the root, and a choice's
 * position names it). So the earlier occurrence a later one runs with, if any, is found in one walk down its
 * arms: one whose arms end on the way, one under another choice on the way, or one at or below its end. Pairs
 * compared one by one took seconds for a few thousand places (a choice of many arms naming one agent), on the
 * thread that installs.
 */
class ArmTree {
  readonly #root: ArmTreeNode = { byChoice: [], children: new Map() };
  /** Each occurrence's place in the order added: the earliest is named, as a pairwise check would. */
  readonly #order = new Map<Occurrence, number>();

  /** The earliest occurrence added that can run in one run with `b`, if any. */
  runsWith(b: Occurrence): Occurrence | undefined {
    let best: Occurrence | undefined;
    let bestIndex = Infinity;
    const consider = (o: Occurrence | undefined): void => {
      if (o === undefined) return;
      const index = this.#order.get(o)!;
      if (index < bestIndex) {
        best = o;
        bestIndex = index;
      }
    };
    let node: ArmTreeNode | undefined = this.#root;
    for (const arm of b.arms) {
      consider(node.endsHere);
      const choice = choiceOf(arm);
      consider(node.byChoice.find((c) => c.choice !== choice)?.first);
      node = node.children.get(arm);
      if (node === undefined) return best;
    }
    consider(node.first);
    return best;
  }

  add(o: Occurrence): void {
    this.#order.set(o, this.#order.size);
    let node = this.#root;
    node.first ??= o;
    for (const arm of o.arms) {
      const choice = choiceOf(arm);
      if (node.byChoice.length < 2 && !node.byChoice.some((c) => c.choice === choice))
        node.byChoice.push({ choice, first: o });
      let child = node.children.get(arm);
      if (child === undefined) {
        child = { byChoice: [], children: new Map() };
        node.children.set(arm, child);
      }
      node = child;
      node.first ??= o;
    }
    node.endsHere ??= o;
  }
}

/**
 * Parallel nodes that would start more steps at once than a runner may: any with more branches than
 * `maxParallelBranches`, and the outermost ones whose steps running at once exceed `maxConcurrentSteps`
 * (branches add up, so nested parallels multiply; a sequence, choice or loop runs one part at a time).
 */
function tooWide(def: GraphDefinition, options: ValidateOptions): DefinitionProblem[] {
  const { maxParallelBranches: maxBranches, maxConcurrentSteps: maxSteps } = options;
  const graphs = subgraphsOf(def);
  const problems: DefinitionProblem[] = [];
  const flows: [Flow, string][] = [
    [def.root, "/root"],
    ...Object.entries(graphs).map(([name, flow]): [Flow, string] => [flow, `/graphs/${escapePointer(name)}`]),
  ];
  if (maxBranches !== undefined) {
    for (const [flow, base] of flows) {
      walkNodes(flow, base, (n, at) => {
        if (n.kind !== "parallel" || n.branches.length <= maxBranches) return;
        problems.push({
          code: "PARALLEL_TOO_MANY_BRANCHES",
          path: `${at}/branches`,
          message: `parallel "${n.id}" has ${n.branches.length} branches; a parallel node may have at most ${maxBranches}, since every branch starts at once; give each branch more of the work, or split the branches over parallel nodes one after another`,
        });
      });
    }
  }
  if (maxSteps === undefined) return problems;
  const subgraphWidths = new Map<string, number>();
  const flowWidth = (flow: Flow): number => flow.reduce((widest, n) => Math.max(widest, width(n)), 0);
  const width = (node: GraphNode): number => {
    switch (node.kind) {
      case "agent":
      case "step":
        return 1;
      case "graph": {
        // No cycles here (validateDefinition checks them first), so this ends.
        let w = subgraphWidths.get(node.graph);
        if (w === undefined) {
          const flow = graphs[node.graph] ?? (node.graph === def.name ? def.root : undefined);
          w = flow ? flowWidth(flow) : 1;
          subgraphWidths.set(node.graph, w);
        }
        return w;
      }
      case "choice":
        return Math.max(1, ...node.arms.map((a) => flowWidth(a.flow)), node.otherwise ? flowWidth(node.otherwise) : 0);
      case "loop":
        return Math.max(flowWidth(node.body), node.until ? flowWidth(node.until) : 0);
      case "parallel":
        return node.branches.reduce((sum, b) => sum + flowWidth(b), 0);
    }
  };
  // Top down: once a parallel node is reported, the ones inside it are part of the same finding.
  const check = (flow: Flow, at: string): void =>
    flow.forEach((n, i) => {
      const here = `${at}/${i}`;
      switch (n.kind) {
        case "parallel": {
          const w = width(n);
          if (w > maxSteps) {
            problems.push({
              code: "TOO_MANY_CONCURRENT_STEPS",
              path: here,
              message: `parallel "${n.id}" can run ${w} steps at once (the branches of parallel nodes inside it add up); a run may run at most ${maxSteps} at once; give it fewer branches, or run some of them one after another`,
            });
          } else n.branches.forEach((b, j) => check(b, `${here}/branches/${j}`));
          return;
        }
        case "choice":
          n.arms.forEach((a, j) => check(a.flow, `${here}/arms/${j}/flow`));
          if (n.otherwise) check(n.otherwise, `${here}/otherwise`);
          return;
        case "loop":
          check(n.body, `${here}/body`);
          if (n.until) check(n.until, `${here}/until`);
          return;
        default:
          return;
      }
    });
  for (const [flow, base] of flows) check(flow, base);
  return problems;
}
