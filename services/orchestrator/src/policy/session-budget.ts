// What a job's sessions may spend at the LLM proxy, in US dollars: the
// agent's own harness.max_budget_usd, else the orchestrator's default
// (OZ0_DEFAULT_MAX_BUDGET_USD), else nothing bounds them. A harness
// operation's scratch sessions spend from their parent's account, under the
// parent agent's budget.
import type { AgentDefinition } from "../plugins/plugin-types.js";

/** A session's budget and whose setting it is (`none`: nothing bounds it). */
export type SessionBudget =
  { usd: number; source: "agent" | "orchestrator_default" } | { usd?: undefined; source: "none" };

export function sessionBudget(
  definition: Pick<AgentDefinition, "harness">,
  defaultUsd: number | undefined,
): SessionBudget {
  const own = definition.harness?.max_budget_usd;
  if (typeof own === "number") return { usd: own, source: "agent" };
  return defaultUsd !== undefined ? { usd: defaultUsd, source: "orchestrator_default" } : { source: "none" };
}

/**
 * What an install says of the agents it published that no budget bounds (none of their own, and no default): their
 * jobs spend at the LLM proxy without limit, which nothing else would tell the operator.
 */
export function unboundedAgentWarnings(
  agents: readonly { name: string; definition: Pick<AgentDefinition, "harness"> }[],
  defaultUsd: number | undefined,
): string[] {
  return agents
    .filter((agent) => sessionBudget(agent.definition, defaultUsd).source === "none")
    .map(
      (agent) =>
        `agent ${agent.name} sets no harness.max_budget_usd and this orchestrator has no OZ0_DEFAULT_MAX_BUDGET_USD: its jobs spend at the LLM proxy without limit; set the agent's harness.max_budget_usd, or OZ0_DEFAULT_MAX_BUDGET_USD where the orchestrator starts`,
    );
}
