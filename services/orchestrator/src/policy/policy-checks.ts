// Checks at publication that an agent's tool policy can be enforced at all.
// Hooks and approvals only see calls a harness asks about; on a harness
// whose manifest says `permissions: false` they would silently never run,
// so such an agent is refused instead of published with a policy it lacks.
import { checkHookSpecs, type HookSpec } from "./hook-rules.js";
import { invalidArgument } from "../orchestrator-error.js";
import type { AgentDefinition, HarnessManifest } from "../plugins/plugin-types.js";

export function checkToolPolicy(options: {
  definition: AgentDefinition;
  harness: HarnessManifest;
  file: string;
}): void {
  const { definition, harness, file } = options;
  const hooks = (definition.hooks ?? []) as unknown as HookSpec[];
  checkHooks(hooks, file);
  if (harness.permissions) return;
  const why = `harness ${harness.name} does not ask before tool calls (permissions is not true in its manifest), so nothing could enforce it; use a harness that asks, or remove the field`;
  if ((definition.harness?.requires_approval ?? []).length > 0)
    throw invalidArgument(`${file}: field /harness/requires_approval: ${why}`);
  if (hooks.length > 0) throw invalidArgument(`${file}: field /hooks: ${why}`);
  if (definition.approvals) throw invalidArgument(`${file}: field /approvals: ${why}`);
}

/** Hook problems a JSON Schema cannot see (a regular expression that does not compile), as invalid_argument. */
export function checkHooks(hooks: HookSpec[], file: string): void {
  try {
    checkHookSpecs(hooks, file);
  } catch (error) {
    throw invalidArgument((error as Error).message);
  }
}
