// The shapes of oz0-plugin.yaml and of an agent YAML file, as their JSON
// Schemas (services/orchestrator/schemas/) define them.

export type HarnessCapability = "permissions" | "runtime_tools" | "structured_output" | "streaming_text";

export interface HarnessManifest {
  name: string;
  command: string[];
  permissions?: boolean;
  capabilities?: HarnessCapability[];
  /** Default tools for agents that set no `harness.tools`. */
  tools?: string[];
}

export interface PluginManifest {
  name: string;
  version: string;
  description?: string;
  harnesses?: HarnessManifest[];
  agents?: string[];
  /** Graph harness definitions (YAML, format oz0.graph/v1), relative to the plugin's folder. */
  graphs?: string[];
  hooks?: Record<string, unknown>[];
}

export interface AgentHarnessOptions {
  tools?: string[];
  requires_approval?: string[];
  max_budget_usd?: number;
  [option: string]: unknown;
}

export interface AgentDefinition {
  name: string;
  description?: string;
  runtime: string;
  model: { primary: string; fallbacks?: string[] };
  /** A file in the plugin, relative to the plugin's folder. */
  instructions: string;
  limits?: { max_steps?: number; timeout?: string };
  harness?: AgentHarnessOptions;
  harness_operations?: Record<string, unknown>[];
  skills?: unknown[];
  hooks?: Record<string, unknown>[];
  /** Calls that wait for a person: an optional deadline (timed_out denies), who may answer, and whether the job's starter may. */
  approvals?: { timeout?: string; approvers?: string[]; prevent_self_approval?: boolean };
}
