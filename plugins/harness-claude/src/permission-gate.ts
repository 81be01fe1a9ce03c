// Every tool call asks the runtime first. Claude Code skips canUseTool for
// calls its permission mode already allows (Read in `default`, edits in
// `acceptEdits`, everything in `bypassPermissions`), so a PreToolUse hook
// answers `ask` for every call: that sends each one through canUseTool, which
// turns it into a protocol permission request. Verified with Claude Code
// 2.1.332 in all four modes (test/session.test.ts).
import type { JsonObject } from "@bufbuild/protobuf";
import { PermissionAnswer_Outcome, type PermissionDecision } from "@oz0/harness";
import type { CanUseTool, HookCallback, PermissionResult } from "@anthropic-ai/claude-agent-sdk";
import type { ClaudeSessionHost } from "./session-port.js";
import { toolTitle } from "./tool-titles.js";
import type { WorkspaceBoundary } from "./workspace-boundary.js";

/**
 * Claude Code's own tool for `outputFormat`: the model "calls" it to hand in
 * the structured result. It runs nothing, so it asks nobody.
 */
export const STRUCTURED_OUTPUT_TOOL = "StructuredOutput";

export interface PermissionGateOptions {
  session: Pick<ClaudeSessionHost, "requestPermission">;
  /** Claude Code tools the session may use (harness.tools). */
  tools: readonly string[];
  /**
   * The runtime's name of a tool it serves (`lookup` for `mcp__oz0__lookup`),
   * or undefined for Claude Code's own tools. A runtime tool is asked about
   * by that name, the one the runtime's policy knows.
   */
  runtimeToolName(sdkName: string): string | undefined;
  /** File tools stay inside the working directory whatever the runtime answers. */
  boundary: WorkspaceBoundary;
  /** Announces the tool call before its permission request, as the protocol orders them. */
  announceToolCall(callId: string, sdkName: string, input: unknown): void;
}

export interface PermissionGate {
  canUseTool: CanUseTool;
  preToolUse: HookCallback;
}

function asObject(value: unknown): JsonObject {
  return value !== null && typeof value === "object" && !Array.isArray(value)
    ? (JSON.parse(JSON.stringify(value)) as JsonObject)
    : {};
}

/** What the model reads when a call is refused: the answer's reason, or why there was none. */
export function denialMessage(answer: PermissionDecision): string {
  const reason = answer.reason.trim();
  switch (answer.outcome) {
    case PermissionAnswer_Outcome.TIMED_OUT:
      return reason || "Nobody approved this tool call in time, so it was not run.";
    case PermissionAnswer_Outcome.CANCELLED:
      return reason || "The job was cancelled while this tool call waited for approval, so it was not run.";
    default:
      return reason || "The runtime's policy denied this tool call, so it was not run.";
  }
}

export function createPermissionGate(options: PermissionGateOptions): PermissionGate {
  const { session } = options;
  const tools = new Set(options.tools);

  const canUseTool: CanUseTool = async (toolName, input, context): Promise<PermissionResult> => {
    if (toolName === STRUCTURED_OUTPUT_TOOL) return { behavior: "allow", updatedInput: input };
    // Runtime tools are tool calls like any other (rule 6): asked about, and relayed only when allowed.
    const runtimeName = options.runtimeToolName(toolName);
    if (runtimeName === undefined && !tools.has(toolName)) {
      // Claude Code only offers harness.tools; this catches anything it adds on its own.
      return {
        behavior: "deny",
        message: `${toolName} is not available in this session (harness.tools is ${[...tools].join(", ")}).`,
      };
    }
    options.announceToolCall(context.toolUseID, toolName, input);
    const outside = runtimeName === undefined ? options.boundary.check(toolName, input) : undefined;
    // Without `permissions` in the request, @oz0/harness allows at once without asking.
    const decision = await session.requestPermission({
      tool: runtimeName ?? toolName,
      input: asObject(input),
      title: context.title ?? toolTitle(runtimeName ?? toolName, input),
      callId: context.toolUseID,
    });
    // Refused whatever the answer, but only once the runtime was asked: the orchestrator stops a job at a
    // tool result that no permission request covers, an error result included.
    if (outside) return { behavior: "deny", message: outside };
    if (decision.allow) {
      // The runtime may answer with another input (the protocol's updated input): it stays inside too.
      const changedOutside = runtimeName === undefined ? options.boundary.check(toolName, decision.input) : undefined;
      if (changedOutside) return { behavior: "deny", message: changedOutside };
      return { behavior: "allow", updatedInput: decision.input };
    }
    return { behavior: "deny", message: denialMessage(decision) };
  };

  const preToolUse: HookCallback = async (input) => {
    if (input.hook_event_name !== "PreToolUse" || input.tool_name === STRUCTURED_OUTPUT_TOOL) return {};
    options.announceToolCall(input.tool_use_id, input.tool_name, input.tool_input);
    return {
      hookSpecificOutput: {
        hookEventName: "PreToolUse",
        permissionDecision: "ask",
        permissionDecisionReason: "Every tool call in an Orchestrator Zero session is decided by the runtime's policy.",
      },
    };
  };

  return { canUseTool, preToolUse };
}
