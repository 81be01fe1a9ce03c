// What a job's sessions may spend at the LLM proxy, in US dollars: the
// agent's own harness.max_budget_usd, else the orchestrator's default
// (OZ0_DEFAULT_MAX_BUDGET_USD), else nothing bounds them. A harness
// operation's scratch sessions spend from their parent's account, under the
// parent agent's budget.
import type { AgentDefinition } from "../plugins/plugin-types.js";

export function sessionBudgetUsd(
  definition: Pick<AgentDefinition, "harness">,
  defaultUsd: number | undefined,
): number | undefined {
  const own = definition.harness?.max_budget_usd;
  return typeof own === "number" ? own : defaultUsd;
}
