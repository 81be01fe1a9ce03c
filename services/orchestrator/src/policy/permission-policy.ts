// The tool policy every permission request of a session goes through, in
// order: (1) the tool must be in the agent's harness.tools (else the harness's
// default tools); (2) hooks, when configured, may allow, deny, change the
// input or ask a person (issue 5 plugs its stages in here); (3) tools in
// harness.requires_approval wait for a person; (4) anything else is allowed.
import type { AgentVersionRecord, DeciderName, JsonObject } from "../store/job-store.js";
import { clippedHarnessText } from "./harness-text.js";

export interface PermissionQuestion {
  jobId: string;
  sessionId: string;
  agent: AgentVersionRecord;
  /** The PermissionRequest's id. */
  id: string;
  tool: string;
  input?: JsonObject;
  title: string;
  callId: string;
  /** Aborted when the job is cancelled while the call is decided: a command hook still running is stopped. */
  signal?: AbortSignal;
}

/** `input`: a changed input, and `inputChangedBy` the hook that chose it (its label, for the record and the approval). */
export type PolicyDecision =
  | { kind: "allow"; decider: DeciderName; reason: string; input?: JsonObject; inputChangedBy?: string }
  /** `stopped`: a command hook was stopped by the question's signal before it answered. */
  | { kind: "deny"; decider: DeciderName; reason: string; stopped?: true }
  | { kind: "ask"; reason: string; input?: JsonObject; inputChangedBy?: string };

/** One step of the policy. `undefined` means "no opinion": the next stage decides. */
export interface PermissionStage {
  readonly name: string;
  decide(question: PermissionQuestion): Promise<PolicyDecision | undefined>;
}

/** The tools an agent version may use: harness.tools, else the harness's declared defaults, plus its harness operations. */
export function allowedTools(agent: AgentVersionRecord): string[] | undefined {
  const tools = agent.definition.harness?.tools ?? agent.harness.manifest.tools;
  const operations = (agent.definition.harness_operations ?? []).map((op) => String(op.key));
  return tools === undefined ? undefined : [...tools, ...operations];
}

export const toolListStage: PermissionStage = {
  name: "tool-list",
  async decide(q) {
    const tools = allowedTools(q.agent);
    if (tools === undefined) return undefined;
    if (tools.includes(q.tool)) return undefined;
    return {
      kind: "deny",
      decider: "policy",
      // The name is the harness's, of any length and holding anything: clipped and inert (harness-text.ts).
      reason: `tool ${clippedHarnessText(q.tool)} is not in this agent's harness.tools (${tools.join(", ") || "none"}); the call was refused`,
    };
  },
};

export const requiresApprovalStage: PermissionStage = {
  name: "requires-approval",
  async decide(q) {
    const list = q.agent.definition.harness?.requires_approval ?? [];
    if (!list.includes(q.tool)) return undefined;
    return { kind: "ask", reason: `${q.tool} is in harness.requires_approval: a person approves each call` };
  },
};

export class PermissionPolicy {
  readonly #hooks: PermissionStage[];

  /** `hooks` run between the tool list and requires_approval. */
  constructor(options: { hooks?: PermissionStage[] } = {}) {
    this.#hooks = options.hooks ?? [];
  }

  async decide(question: PermissionQuestion): Promise<PolicyDecision> {
    const refused = await toolListStage.decide(question);
    if (refused) return refused;
    let allowed: Extract<PolicyDecision, { kind: "allow" }> | undefined;
    for (const stage of this.#hooks) {
      const decision = await stage.decide(question);
      if (!decision) continue;
      if (decision.kind !== "allow") return decision;
      allowed = decision;
      break;
    }
    // A hook's allow does not skip requires_approval: the person then sees the input the hook chose.
    const input = allowed?.input ?? question.input;
    const asked = await requiresApprovalStage.decide({ ...question, ...(input ? { input } : {}) });
    if (asked?.kind === "ask") {
      return {
        kind: "ask",
        reason: allowed ? `${allowed.reason}; ${asked.reason}` : asked.reason,
        ...(allowed?.input ? { input: allowed.input } : {}),
        ...(allowed?.inputChangedBy ? { inputChangedBy: allowed.inputChangedBy } : {}),
      };
    }
    return allowed ?? { kind: "allow", decider: "policy", reason: "no rule asks for approval" };
  }
}
