// Graph harnesses from plugins: `graphs:` in oz0-plugin.yaml lists YAML
// definitions (format oz0.graph/v1). They are read and validated before the
// plugin is registered (an install is all or nothing), then published as
// immutable versions the way agents are: a different content hash publishes
// version N+1, the same hash keeps the latest. Versions live in the graph
// store (graph-store.ts: <home>/graphs.db, or the replicas' PostgreSQL),
// next to the runs' checkpoints.
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { publicIdentifier } from "@oz0/events-client";
import {
  canonicalJson,
  parseDefinitionYaml,
  stepPathBounds,
  validateDefinition,
  type Flow,
  type GraphDefinition,
  type GraphNode,
} from "@oz0/graph";
import type { GraphStore, GraphVersionRecord, NewGraphVersion } from "../store/graph-store.js";
import type { JobStore } from "../store/job-store.js";
import { failedPrecondition, invalidArgument, notFound } from "../orchestrator-error.js";
import { NAME_PATTERN, NAME_WORDS } from "../plugins/yaml-validation.js";
import { stepIdOf } from "./graph-step-notes.js";

export type { GraphVersionRecord } from "../store/graph-store.js";

/**
 * Every branch of a parallel node starts at once, and each step is a job (an agent's session, a custom step's
 * session on a sandbox node): a graph fanning out to thousands of branches would start thousands of sessions at
 * once. A parallel node may have at most this many branches...
 */
export const MAX_PARALLEL_BRANCHES = 32;
/** ...and one run at most this many steps running at once, nested parallels multiplied. */
export const MAX_CONCURRENT_STEPS = 64;

/** A graph read from a plugin and validated, not yet published. */
export interface PreparedGraph {
  file: string;
  definition: GraphDefinition;
}

/** Every node of a definition, subgraphs included (choice evaluators and loop terminals too). */
export function graphNodes(definition: GraphDefinition): GraphNode[] {
  const out: GraphNode[] = [];
  const walk = (flow: Flow | undefined): void => {
    for (const node of flow ?? []) {
      out.push(node);
      switch (node.kind) {
        case "parallel":
          for (const b of node.branches) walk(b);
          break;
        case "choice":
          if (node.evaluator) out.push(node.evaluator);
          for (const arm of node.arms) walk(arm.flow);
          walk(node.otherwise);
          break;
        case "loop":
          walk(node.body);
          walk(node.until);
          break;
        default:
          break;
      }
    }
  };
  walk(definition.root);
  for (const flow of Object.values(definition.graphs ?? {})) walk(flow);
  return out;
}

/** Agent names a definition uses (the manager included). */
export function graphAgents(definition: GraphDefinition): string[] {
  const names = new Set<string>();
  for (const n of graphNodes(definition)) if (n.kind === "agent") names.add(n.agent);
  if (definition.managerAgent) names.add(definition.managerAgent);
  return [...names].sort();
}

export interface GraphRegistryOptions {
  store: JobStore;
  /** Where versions are kept (openGraphStore). */
  graphStore: GraphStore;
}

export class GraphRegistry {
  readonly #graphs: GraphStore;
  readonly #store: JobStore;

  constructor(options: GraphRegistryOptions) {
    this.#graphs = options.graphStore;
    this.#store = options.store;
  }

  /** The store versions are kept in. */
  get graphStore(): GraphStore {
    return this.#graphs;
  }

  /**
   * Read and validate a plugin's graphs. Agents may come from this plugin
   * (`pluginAgents`) or any installed one; custom steps must name a module
   * file inside the plugin, because they are loaded from it in the sandbox.
   */
  async prepare(options: { root: string; files: string[]; pluginAgents: string[] }): Promise<PreparedGraph[]> {
    const known = new Set(options.pluginAgents);
    for (const a of await this.#store.listAgents()) known.add(a.name);
    const seen = new Set<string>();
    const prepared: PreparedGraph[] = [];
    for (const rel of options.files) {
      const file = path.resolve(options.root, rel);
      if (!file.startsWith(options.root + path.sep))
        throw invalidArgument(`oz0-plugin.yaml: field /graphs: ${rel} is outside the plugin; list files inside it`);
      if (!existsSync(file))
        throw invalidArgument(`${rel}: file not found; create it or fix the path in oz0-plugin.yaml /graphs`);
      let definition: GraphDefinition;
      try {
        definition = parseDefinitionYaml(readFileSync(file, "utf8"));
      } catch (error) {
        throw invalidArgument(`${rel}: ${(error as Error).message}`);
      }
      const result = validateDefinition(definition, {
        knownAgents: known,
        maxParallelBranches: MAX_PARALLEL_BRANCHES,
        maxConcurrentSteps: MAX_CONCURRENT_STEPS,
      });
      if (!result.ok) {
        const problems = result.problems.map((p) => `${p.code} at ${p.path}: ${p.message}`).join("; ");
        throw invalidArgument(`${rel}: graph "${definition.name}" is invalid: ${problems}`);
      }
      // `oz0 run NAME` runs an agent or a graph by its name: a graph's follows the rule of agents'.
      if (!NAME_PATTERN.test(definition.name))
        throw invalidArgument(
          `${rel}: field /name: graph name ${JSON.stringify(definition.name)} is not a name of ${NAME_WORDS} (the rule for agent names, which share its name space); rename the graph`,
        );
      if (seen.has(definition.name))
        throw invalidArgument(
          `${rel}: field /name: graph "${definition.name}" is defined twice in this plugin; rename one`,
        );
      if (known.has(definition.name)) {
        throw invalidArgument(
          `${rel}: field /name: "${definition.name}" is already an agent; agents and graphs share one name space, so rename the graph`,
        );
      }
      seen.add(definition.name);
      checkStepIds(rel, definition);
      for (const node of graphNodes(definition)) {
        if (node.kind !== "step") continue;
        if (!node.module)
          throw invalidArgument(
            `${rel}: custom step "${node.step}" (${node.id}) names no module; set module to a JavaScript file in the plugin`,
          );
        const mod = path.resolve(options.root, node.module);
        if (!mod.startsWith(options.root + path.sep) || !existsSync(mod)) {
          throw invalidArgument(
            `${rel}: custom step "${node.step}" (${node.id}): module ${node.module} is not a file in the plugin; give a path relative to the plugin's folder`,
          );
        }
      }
      prepared.push({ file: rel, definition });
    }
    return prepared;
  }

  /** Publish a prepared graph: version N+1 when its content changed, else the latest version stays. */
  async publishVersion(options: {
    graph: PreparedGraph;
    plugin: string;
    pluginVersion: string;
    pluginPath: string;
  }): Promise<{ published: boolean; record: GraphVersionRecord }> {
    return this.#graphs.publishVersion(newVersion(options));
  }

  /** The latest version (or the one asked for), or undefined when no graph has that name. */
  async findVersion(name: string, version?: number): Promise<GraphVersionRecord | undefined> {
    return this.#graphs.getVersion(name, version);
  }

  /** The latest version (or the one asked for); NOT_FOUND, saying what to do, when there is none. */
  async resolveVersion(name: string, version?: number): Promise<GraphVersionRecord> {
    const found = await this.findVersion(name, version);
    if (found) return found;
    throw notFoundError(name, version, version ? await this.findVersion(name) : undefined);
  }

  /**
   * The version to run, refused when it starts more steps at once than the install now allows: a version
   * installed before the limits would still have fanned out to every branch.
   */
  async runnableVersion(name: string): Promise<GraphVersionRecord> {
    const graph = await this.resolveVersion(name);
    const result = validateDefinition(graph.definition, {
      maxParallelBranches: MAX_PARALLEL_BRANCHES,
      maxConcurrentSteps: MAX_CONCURRENT_STEPS,
    });
    if (result.ok) return graph;
    const problems = result.problems.map((p) => `${p.code} at ${p.path}: ${p.message}`).join("; ");
    throw failedPrecondition(
      `graph ${graph.name} version ${graph.version} (plugin ${graph.plugin}) was installed before its limits were checked and is not run: ${problems}; fix the graph and install its plugin again`,
    );
  }

  /** Every graph at its latest version. */
  async listLatest(): Promise<GraphVersionRecord[]> {
    return this.#graphs.listLatestVersions();
  }
}

/**
 * A step's lifecycle events carry `<node id>@<step path>` as graph_step_id, which the events service keeps only
 * as an identifier (@oz0/events-client: at most 128 of [A-Za-z0-9_.:@+-], the first a letter or digit, no session
 * token) and clears otherwise, losing which step the event is about. The node id is the author's, so a graph
 * whose ids cannot be carried, at the longest path a run can reach (loops at their last iteration, a manager's
 * retries included), is refused here rather than its events losing their step.
 */
function checkStepIds(rel: string, definition: GraphDefinition): void {
  for (const bound of stepPathBounds(definition)) {
    const stepId = stepIdOf({ nodeId: bound.nodeId, path: bound.longestPath });
    if (publicIdentifier(stepId) !== undefined) continue;
    throw invalidArgument(
      `${rel}: field ${bound.where}: node id "${bound.nodeId}" cannot name its step on lifecycle events, which carry "<node id>@<step path>" (here up to "${stepId}", ${stepId.length} characters) and keep at most 128 characters of letters, digits and _.:@+-, starting with a letter or digit; give the node a shorter id of those characters`,
    );
  }
}

function newVersion(options: {
  graph: PreparedGraph;
  plugin: string;
  pluginVersion: string;
  pluginPath: string;
}): NewGraphVersion {
  const { definition } = options.graph;
  const usesSteps = graphNodes(definition).some((n) => n.kind === "step");
  // Custom step code lives in the plugin's content-addressed folder: a changed step is a changed graph.
  const content = canonicalJson({ definition, steps: usesSteps ? path.basename(options.pluginPath) : null });
  const contentHash = `sha256:${createHash("sha256").update(content).digest("hex")}`;
  return {
    name: definition.name,
    contentHash,
    plugin: options.plugin,
    pluginVersion: options.pluginVersion,
    pluginPath: options.pluginPath,
    definition,
  };
}

function notFoundError(name: string, version: number | undefined, latest: GraphVersionRecord | undefined): Error {
  if (latest && version) return notFound(`graph ${name} has no version ${version} (latest is ${latest.version})`);
  return notFound(
    `unknown graph "${name}"; install the plugin that declares it under graphs: with \`oz0 plugin install\``,
  );
}
