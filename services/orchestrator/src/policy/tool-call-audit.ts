// "Every tool call asks first" is checked, not trusted: a harness that
// declares permissions gets each tool result compared with the answered
// permission requests of its job. A result for a call nobody was asked
// about, for a call still waiting, or a successful result for a call that
// was refused means the harness ran a tool on its own: the job fails with
// the rule it broke. (A refused call's result is fine when it reports the
// refusal as an error, which is what a well-behaved harness sends.)
import { isDeepStrictEqual } from "node:util";
import type { PermissionRecord } from "../store/job-store.js";
import { clippedHarnessText } from "./harness-text.js";

export interface ToolResultSeen {
  callId: string;
  isError: boolean;
}

/** What the audit reads of the permission a result answers: a stored request's record, or a scratch session's decision. */
export type PermissionSeen = Pick<PermissionRecord, "tool" | "status" | "decider" | "reason">;

/** The rule a tool result breaks, as a message for the job's failure; undefined when it is fine. */
export function toolResultViolation(options: {
  result: ToolResultSeen;
  permission: PermissionSeen | undefined;
  harness: string;
}): string | undefined {
  const { permission: p, harness } = options;
  // The ids and tool names are the harness's own, of any length: clipped for the log and the job's error.
  const callId = clippedHarnessText(options.result.callId);
  const tool = p ? clippedHarnessText(p.tool) : "";
  const result = { ...options.result, callId };
  if (!p) {
    // A result with no call id names no call, so no answer covers it (an approved request without one included).
    const call = result.callId ? `tool call ${result.callId}` : "a tool call whose result names no call id";
    return `policy bypass: harness ${harness} ran ${call} without asking permission first (rule: every tool call asks first); the job was stopped`;
  }
  if (p.status === "pending") {
    return `policy bypass: harness ${harness} ran ${tool} call ${result.callId} while it still waited for a person (rule: a call runs only once it is allowed); the job was stopped`;
  }
  if (p.status !== "approved" && !result.isError) {
    const rule =
      p.decider === "policy" && /not in this agent's harness\.tools/.test(p.reason)
        ? "rule: only the tools in harness.tools run"
        : `rule: a ${p.status === "denied" ? "denied" : p.status === "timed_out" ? "timed-out" : "cancelled"} call does not run`;
    return `policy bypass: harness ${harness} ran ${tool} call ${result.callId} although it was ${p.status.replace("_", " ")} (${rule}); the job was stopped`;
  }
  return undefined;
}

/**
 * Whether a runtime call's input is what was allowed: each of its fields as the allowed input has it, and each
 * allowed field the tool's schema names there too. The allowed input may hold fields the schema does not name (a
 * harness that parses a tool's input by its schema drops them, as Claude Code's MCP tools do); a field the call
 * adds, changes, or leaves out while its schema names it (the tool would run with a default the person never
 * saw) was never allowed. `named` is the schema's fields; without it, every allowed field must be there.
 */
export function inputAllowed(input: object, allowed: object, named?: ReadonlySet<string>): boolean {
  const given = input as Record<string, unknown>;
  const granted = allowed as Record<string, unknown>;
  const same = (key: string) => Object.hasOwn(granted, key) && isDeepStrictEqual(given[key], granted[key]);
  const kept = (key: string) => Object.hasOwn(given, key) || (named !== undefined && !named.has(key));
  return Object.keys(given).every(same) && Object.keys(granted).every(kept);
}
