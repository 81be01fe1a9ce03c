// Immutable agent versions: an agent's definition, its rendered instructions
// and the harness it runs (its manifest entry and the fingerprint of what its
// command runs, harness-fingerprint.ts) are hashed; a different hash publishes
// version N+1, the same hash keeps the latest version. Jobs pin the version
// they start on.
import { createHash } from "node:crypto";
import { fingerprintChanges, type FingerprintedHarness } from "./harness-fingerprint.js";
import type { AgentVersionRecord, JobStore, PublishResult } from "../store/job-store.js";
import { notFound } from "../orchestrator-error.js";
import type { AgentDefinition } from "../plugins/plugin-types.js";

/** JSON with object keys sorted, so equal content always hashes the same. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

export function agentContentHash(options: {
  definition: AgentDefinition;
  instructions: string;
  harness: FingerprintedHarness;
}): string {
  const content = canonicalJson({
    definition: options.definition,
    instructions: options.instructions,
    harness: {
      plugin: options.harness.plugin,
      manifest: options.harness.manifest,
      fingerprint: options.harness.fingerprint,
    },
  });
  return `sha256:${createHash("sha256").update(content).digest("hex")}`;
}

export class AgentVersions {
  readonly #store: JobStore;

  constructor(options: { store: JobStore }) {
    this.#store = options.store;
  }

  async publish(options: {
    definition: AgentDefinition;
    instructions: string;
    plugin: string;
    pluginVersion: string;
    pluginPath: string;
    harness: FingerprintedHarness;
  }): Promise<PublishResult & { reasons: string[] }> {
    const previous = await this.#store.getAgentVersion(options.definition.name);
    const contentHash = agentContentHash(options);
    const result = await this.#store.publishAgentVersion({
      name: options.definition.name,
      contentHash,
      plugin: options.plugin,
      pluginVersion: options.pluginVersion,
      pluginPath: options.pluginPath,
      definition: options.definition,
      instructions: options.instructions,
      harness: options.harness,
    });
    return { ...result, reasons: result.published ? publishReasons({ ...options, previous }) : [] };
  }

  /** The latest version, or the one asked for; not_found says what to do. */
  async resolve(name: string, version?: number): Promise<AgentVersionRecord> {
    const found = await this.#store.getAgentVersion(name, version || undefined);
    if (found) return found;
    const known = await this.#store.getAgentVersion(name);
    if (known && version) {
      throw notFound(
        `agent ${name} has no version ${version} (latest is ${known.version}); see \`oz0 agents versions ${name}\``,
      );
    }
    throw notFound(
      `unknown agent "${name}"; see \`oz0 agents list\`, or install the plugin that defines it with \`oz0 plugin install\``,
    );
  }

  list(): Promise<AgentVersionRecord[]> {
    return this.#store.listAgents();
  }

  async versions(name: string): Promise<AgentVersionRecord[]> {
    const versions = await this.#store.listAgentVersions(name);
    if (versions.length === 0) throw notFound(`unknown agent "${name}"; see \`oz0 agents list\``);
    return versions;
  }
}

/** Why a version differs from the agent's previous one, in words an install prints. */
export function publishReasons(options: {
  definition: AgentDefinition;
  instructions: string;
  harness: FingerprintedHarness;
  previous: AgentVersionRecord | undefined;
}): string[] {
  const { previous, harness } = options;
  if (!previous) return ["first version"];
  const before = previous.harness as FingerprintedHarness;
  const reasons: string[] = [];
  if (canonicalJson(previous.definition) !== canonicalJson(options.definition)) reasons.push("definition changed");
  if (previous.instructions !== options.instructions) reasons.push("instructions changed");
  if (before.plugin !== harness.plugin || before.manifest.name !== harness.manifest.name)
    reasons.push(`harness changed to ${harness.plugin}'s ${harness.manifest.name}`);
  else {
    if (canonicalJson(before.manifest) !== canonicalJson(harness.manifest))
      reasons.push(`harness ${harness.manifest.name}'s manifest entry changed`);
    reasons.push(...fingerprintChanges({ harness, previous: before }));
  }
  return reasons.length > 0 ? reasons : ["content changed"];
}

/** `30m`, `1h30m`, `90s` → milliseconds. */
export function parseDuration(text: string): number {
  const match = /^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$/.exec(text);
  if (!match || text === "") throw new Error(`invalid duration "${text}": use forms like 30m, 1h30m or 90s`);
  const [, h, m, s] = match;
  return ((Number(h ?? 0) * 60 + Number(m ?? 0)) * 60 + Number(s ?? 0)) * 1000;
}
