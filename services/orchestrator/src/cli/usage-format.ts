// How usage, costs and durations read on a terminal, the same in
// `oz0 usage`, `oz0 jobs show` and the live status line.
import type { Usage } from "@oz0/proto/oz0/llmproxy/v1/llm_proxy_pb";
import { BudgetSource, type AgentVersion } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";

/** `$0.0123`, marked when the price is nominal (a scripted provider's table: nobody was charged) or estimated. */
export function costText(usage: Pick<Usage, "costUsd" | "nominal" | "estimated"> | undefined): string {
  const marks = [usage?.nominal ? "nominal" : "", usage?.estimated ? "estimated" : ""].filter(Boolean);
  return `$${(usage?.costUsd ?? 0).toFixed(4)}${marks.length > 0 ? ` (${marks.join(", ")})` : ""}`;
}

/** `1,234 in / 56 out tokens`. */
export function tokensText(tokens: { input: number | bigint; output: number | bigint }): string {
  const n = (value: number | bigint): string => Number(value).toLocaleString("en-US");
  return `${n(tokens.input)} in / ${n(tokens.output)} out tokens`;
}

/** `12.345 s`, to the millisecond. */
export function durationText(ms: number): string {
  return `${(Math.max(ms, 0) / 1000).toFixed(3)} s`;
}

/** `1:05` or `1:02:05`: a running clock. */
export function clockText(ms: number): string {
  const total = Math.max(Math.floor(ms / 1000), 0);
  const hours = Math.floor(total / 3600);
  const minutes = Math.floor((total % 3600) / 60);
  const seconds = String(total % 60).padStart(2, "0");
  return hours > 0 ? `${hours}:${String(minutes).padStart(2, "0")}:${seconds}` : `${minutes}:${seconds}`;
}

/** Said once, under a table with a nominal cost in it. */
export const NOMINAL_NOTE =
  "nominal: priced from the scripted model's table; no provider was called and nobody was charged";

/** One row of `oz0 usage`: who, calls, failed calls, attempts, tokens and cost, in fixed columns (the console's too). */
export function usageLine(who: string, u: Usage | undefined): string {
  return (
    `${who.padEnd(24)} ${String(u?.calls ?? 0).padStart(5)} calls ${String(u?.failedCalls ?? 0).padStart(4)} failed ${String(u?.attempts ?? 0).padStart(5)} attempts ` +
    `${String(u?.inputTokens ?? 0).padStart(8)} in ${String(u?.outputTokens ?? 0).padStart(8)} out ` +
    `${String(u?.cacheReadTokens ?? 0).padStart(7)} cache-read ${String(u?.cacheWriteTokens ?? 0).padStart(7)} cache-write  ${costText(u)}`
  );
}

/**
 * An agent version's session budget, short for a listing (`$1.00`, `$0.50 default`, `no budget`) or long for
 * `oz0 agents show`, saying whose setting it is; "" for a graph (its steps' agents have their own).
 */
export function budgetText(agent: Pick<AgentVersion, "budgetUsd" | "budgetSource">, form: "short" | "long"): string {
  // Cents, or the digits a budget below a cent needs ($0.0001 is not "$0.00").
  const usd = `$${agent.budgetUsd >= 0.01 ? agent.budgetUsd.toFixed(2) : String(agent.budgetUsd)}`;
  switch (agent.budgetSource) {
    case BudgetSource.AGENT:
      return form === "short" ? usd : `${usd} a session (the agent's harness.max_budget_usd)`;
    case BudgetSource.ORCHESTRATOR_DEFAULT:
      return form === "short"
        ? `${usd} default`
        : `${usd} a session (the orchestrator's OZ0_DEFAULT_MAX_BUDGET_USD: the agent sets none)`;
    case BudgetSource.NONE:
      return form === "short"
        ? "no budget"
        : "none: its jobs spend without limit (set the agent's harness.max_budget_usd, or OZ0_DEFAULT_MAX_BUDGET_USD where the orchestrator starts)";
    default:
      return "";
  }
}
