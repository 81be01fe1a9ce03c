// Graph harnesses from plugins: `graphs:` in oz0-plugin.yaml lists YAML
// definitions (format oz0.graph/v1). They are read and validated before the
// plugin is registered (an install is all or nothing), then published as
// immutable versions the way agents are: a different content hash publishes
// version N+1, the same hash keeps the latest. Versions live in the graph
// database (<home>/graphs.db), next to the runs' checkpoints.
import { createHash } from "node:crypto";
import { existsSync, mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import {
  canonicalJson,
  parseDefinitionYaml,
  validateDefinition,
  type Flow,
  type GraphDefinition,
  type GraphNode,
} from "@oz0/graph";
import { readFileSync } from "node:fs";
import type { JobStore } from "./job-store.js";
import { invalidArgument, notFound } from "./orchestrator-error.js";

export interface GraphVersionRecord {
  name: string;
  version: number;
  contentHash: string;
  plugin: string;
  pluginVersion: string;
  /** The plugin's installed, content-addressed folder: custom step modules resolve against it. */
  pluginPath: string;
  definition: GraphDefinition;
  publishedAt: Date;
}

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

/** The graph database: versions, run bookkeeping and (shared handle) the checkpoints. */
export function openGraphDatabase(home: string): Database.Database {
  mkdirSync(home, { recursive: true });
  const db = new Database(path.join(home, "graphs.db"));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  db.pragma("busy_timeout = 5000");
  db.exec(`
    CREATE TABLE IF NOT EXISTS orch_graph_versions (
      name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL,
      plugin TEXT NOT NULL, plugin_version TEXT NOT NULL, plugin_path TEXT NOT NULL,
      definition TEXT NOT NULL, published_at INTEGER NOT NULL,
      PRIMARY KEY (name, version)
    );
    CREATE TABLE IF NOT EXISTS orch_graph_jobs (
      job_id TEXT PRIMARY KEY, graph TEXT NOT NULL, version INTEGER NOT NULL,
      pinned_agents TEXT NOT NULL, created_at INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS orch_graph_step_jobs (
      idempotency_key TEXT PRIMARY KEY, run_id TEXT NOT NULL, step_job_id TEXT NOT NULL, created_at INTEGER NOT NULL
    );
  `);
  return db;
}

interface VersionRow {
  name: string;
  version: number;
  content_hash: string;
  plugin: string;
  plugin_version: string;
  plugin_path: string;
  definition: string;
  published_at: number;
}

function fromRow(r: VersionRow): GraphVersionRecord {
  return {
    name: r.name,
    version: r.version,
    contentHash: r.content_hash,
    plugin: r.plugin,
    pluginVersion: r.plugin_version,
    pluginPath: r.plugin_path,
    definition: JSON.parse(r.definition) as GraphDefinition,
    publishedAt: new Date(r.published_at),
  };
}

export class GraphRegistry {
  readonly #db: Database.Database;
  readonly #store: JobStore;

  constructor(options: { db: Database.Database; store: JobStore }) {
    this.#db = options.db;
    this.#store = options.store;
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
      if (!file.startsWith(options.root + path.sep)) throw invalidArgument(`oz0-plugin.yaml: field /graphs: ${rel} is outside the plugin; list files inside it`);
      if (!existsSync(file)) throw invalidArgument(`${rel}: file not found; create it or fix the path in oz0-plugin.yaml /graphs`);
      let definition: GraphDefinition;
      try {
        definition = parseDefinitionYaml(readFileSync(file, "utf8"));
      } catch (error) {
        throw invalidArgument(`${rel}: ${(error as Error).message}`);
      }
      const result = validateDefinition(definition, { knownAgents: known });
      if (!result.ok) {
        const problems = result.problems.map((p) => `${p.code} at ${p.path}: ${p.message}`).join("; ");
        throw invalidArgument(`${rel}: graph "${definition.name}" is invalid: ${problems}`);
      }
      if (seen.has(definition.name)) throw invalidArgument(`${rel}: field /name: graph "${definition.name}" is defined twice in this plugin; rename one`);
      if (known.has(definition.name)) {
        throw invalidArgument(`${rel}: field /name: "${definition.name}" is already an agent; agents and graphs share one name space, so rename the graph`);
      }
      seen.add(definition.name);
      for (const node of graphNodes(definition)) {
        if (node.kind !== "step") continue;
        if (!node.module) throw invalidArgument(`${rel}: custom step "${node.step}" (${node.id}) names no module; set module to a JavaScript file in the plugin`);
        const mod = path.resolve(options.root, node.module);
        if (!mod.startsWith(options.root + path.sep) || !existsSync(mod)) {
          throw invalidArgument(`${rel}: custom step "${node.step}" (${node.id}): module ${node.module} is not a file in the plugin; give a path relative to the plugin's folder`);
        }
      }
      prepared.push({ file: rel, definition });
    }
    return prepared;
  }

  /** Publish a prepared graph: version N+1 when its content changed, else the latest version stays. */
  publish(options: { graph: PreparedGraph; plugin: string; pluginVersion: string; pluginPath: string }): { published: boolean; record: GraphVersionRecord } {
    const { definition } = options.graph;
    const usesSteps = graphNodes(definition).some((n) => n.kind === "step");
    // Custom step code lives in the plugin's content-addressed folder: a changed step is a changed graph.
    const content = canonicalJson({ definition, steps: usesSteps ? path.basename(options.pluginPath) : null });
    const contentHash = `sha256:${createHash("sha256").update(content).digest("hex")}`;
    return this.#db.transaction(() => {
      const latest = this.#db.prepare("SELECT * FROM orch_graph_versions WHERE name = ? ORDER BY version DESC LIMIT 1").get(definition.name) as VersionRow | undefined;
      if (latest && latest.content_hash === contentHash) return { published: false, record: fromRow(latest) };
      const row: VersionRow = {
        name: definition.name,
        version: (latest?.version ?? 0) + 1,
        content_hash: contentHash,
        plugin: options.plugin,
        plugin_version: options.pluginVersion,
        plugin_path: options.pluginPath,
        definition: JSON.stringify(definition),
        published_at: Date.now(),
      };
      this.#db
        .prepare(
          "INSERT INTO orch_graph_versions (name, version, content_hash, plugin, plugin_version, plugin_path, definition, published_at) VALUES (@name, @version, @content_hash, @plugin, @plugin_version, @plugin_path, @definition, @published_at)",
        )
        .run(row);
      return { published: true, record: fromRow(row) };
    })();
  }

  /** The latest version (or the one asked for), or undefined when no graph has that name. */
  find(name: string, version?: number): GraphVersionRecord | undefined {
    const row = (
      version
        ? this.#db.prepare("SELECT * FROM orch_graph_versions WHERE name = ? AND version = ?").get(name, version)
        : this.#db.prepare("SELECT * FROM orch_graph_versions WHERE name = ? ORDER BY version DESC LIMIT 1").get(name)
    ) as VersionRow | undefined;
    return row ? fromRow(row) : undefined;
  }

  resolve(name: string, version?: number): GraphVersionRecord {
    const found = this.find(name, version);
    if (found) return found;
    const latest = this.find(name);
    if (latest && version) throw notFound(`graph ${name} has no version ${version} (latest is ${latest.version})`);
    throw notFound(`unknown graph "${name}"; install the plugin that declares it under graphs: with \`oz0 plugin install\``);
  }

  /** Every graph at its latest version. */
  list(): GraphVersionRecord[] {
    const rows = this.#db
      .prepare("SELECT v.* FROM orch_graph_versions v JOIN (SELECT name, MAX(version) AS version FROM orch_graph_versions GROUP BY name) m ON v.name = m.name AND v.version = m.version ORDER BY v.name")
      .all() as VersionRow[];
    return rows.map(fromRow);
  }
}
