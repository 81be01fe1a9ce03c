// Checks at publication that an agent's tool policy can be enforced at all.
// Hooks and approvals only see calls a harness asks about; on a harness
// whose manifest says `permissions: false` they would silently never run,
// so such an agent is refused instead of published with a policy it lacks.
import { distance } from "fastest-levenshtein";
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
  checkEnforcedOptions({ definition, harness, file });
  if (harness.permissions) return;
  const why = `harness ${harness.name} does not ask before tool calls (permissions is not true in its manifest), so nothing could enforce it; use a harness that asks, or remove the field`;
  if ((definition.harness?.requires_approval ?? []).length > 0)
    throw invalidArgument(`${file}: field /harness/requires_approval: ${why}`);
  if (hooks.length > 0) throw invalidArgument(`${file}: field /hooks: ${why}`);
  if (definition.approvals) throw invalidArgument(`${file}: field /approvals: ${why}`);
}

/** The `harness` options the orchestrator itself enforces; every other key goes to the harness as it is. */
const ENFORCED_OPTIONS = ["tools", "requires_approval", "max_budget_usd"] as const;

/**
 * A misspelt enforced option is no option at all: `requires_aproval` or `max_budget_ust` installed, and the
 * tool ran with no approval and no budget (operator review). The other keys of `harness` belong to the
 * harness, so they cannot all be refused; a key this close to an enforced one is. And a requires_approval
 * entry that is none of the agent's tools (`Run_command` beside `run_command`) asks about nothing.
 */
function checkEnforcedOptions(options: { definition: AgentDefinition; harness: HarnessManifest; file: string }): void {
  const { definition, harness, file } = options;
  const given = definition.harness ?? {};
  for (const key of Object.keys(given)) {
    if ((ENFORCED_OPTIONS as readonly string[]).includes(key)) continue;
    const meant = ENFORCED_OPTIONS.find((enforced) => nearMiss(key, enforced));
    if (meant)
      throw invalidArgument(
        `${file}: field /harness/${key}: did you mean ${meant}? The orchestrator enforces ${ENFORCED_OPTIONS.join(", ")}; any other key of harness goes to the harness as it is, so a misspelt one would enforce nothing`,
      );
  }
  const tools = definition.harness?.tools ?? harness.tools;
  if (tools === undefined) return;
  for (const tool of definition.harness?.requires_approval ?? []) {
    if (tools.includes(tool)) continue;
    const alike = tools.find((t) => t.toLowerCase() === tool.toLowerCase());
    throw invalidArgument(
      `${file}: field /harness/requires_approval: ${tool} is not one of the agent's tools (${tools.join(", ")}), so no call of it is ever asked about${alike ? `; tool names are exact: did you mean ${alike}?` : "; add it to harness.tools, or remove it"}`,
    );
  }
}

/**
 * Whether `key` is `target` misspelt: the same but for case or dashes, cut short (`max_budget`), or at most two
 * letters added, dropped or changed (a swap of two is two).
 */
function nearMiss(key: string, target: string): boolean {
  const a = key.toLowerCase().replaceAll("-", "_");
  return a === target || (a.length >= 5 && target.startsWith(a)) || distance(a, target) <= 2;
}

/** Hook problems a JSON Schema cannot see (a regular expression that does not compile), as invalid_argument. */
export function checkHooks(hooks: HookSpec[], file: string): void {
  try {
    checkHookSpecs(hooks, file);
  } catch (error) {
    throw invalidArgument((error as Error).message);
  }
}
