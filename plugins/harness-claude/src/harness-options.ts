// The agent's `harness:` options for this harness: parsed, checked and
// refused with an error that names the option, both at install time (the
// orchestrator calls validateHarnessOptions) and at run time.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

/** The Claude Code tools a session may use; anything else is refused. */
export const SUPPORTED_TOOLS = ["Read", "Write", "Edit", "Glob", "Grep", "Bash"] as const;
export type SupportedTool = (typeof SUPPORTED_TOOLS)[number];

/** Tools a session gets when `harness.tools` is not set. */
export const DEFAULT_TOOLS: readonly SupportedTool[] = SUPPORTED_TOOLS;

export const PERMISSION_MODES = ["default", "acceptEdits", "plan", "bypassPermissions"] as const;
export type ClaudePermissionMode = (typeof PERMISSION_MODES)[number];

export const SYSTEM_PROMPT_MODES = ["append", "replace"] as const;
export type SystemPromptMode = (typeof SYSTEM_PROMPT_MODES)[number];

/** The options this harness understands, with defaults applied. */
export interface ClaudeHarnessOptions {
  tools: SupportedTool[];
  permissionMode: ClaudePermissionMode;
  systemPrompt: SystemPromptMode;
  /** Undefined: no budget set by the agent (the LLM proxy may still have one). */
  maxBudgetUsd: number | undefined;
  /** Used by the runtime's policy, not by the harness; kept for completeness. */
  requiresApproval: string[];
}

/** One problem with one option. */
export interface HarnessOptionProblem {
  /** The option's name as the agent writes it, for example `permission_mode`. */
  option: string;
  message: string;
}

/** Thrown by parseHarnessOptions; `problems` names every bad option. */
export class HarnessOptionsError extends Error {
  readonly code = "invalid_harness_options";
  constructor(readonly problems: HarnessOptionProblem[]) {
    super(
      `invalid harness options for claude-agent-sdk: ${problems
        .map((p) => `harness.${p.option}: ${p.message}`)
        .join("; ")}`,
    );
    this.name = "HarnessOptionsError";
  }
}

const KNOWN_OPTIONS = ["tools", "permission_mode", "system_prompt", "max_budget_usd", "requires_approval"];

function oneOf<T extends string>(values: readonly T[], value: JsonValue | undefined): value is T {
  return typeof value === "string" && (values as readonly string[]).includes(value);
}

function describe(value: JsonValue | undefined): string {
  return JSON.stringify(value) ?? "undefined";
}

/**
 * Every problem with `options` (an agent's `harness:` block), or an empty list
 * when they are valid. Safe to call at install time: it reads nothing else.
 */
export function validateHarnessOptions(options: JsonObject | undefined | null): HarnessOptionProblem[] {
  return check(options ?? {}).problems;
}

/** The options with defaults applied; throws HarnessOptionsError naming every bad option. */
export function parseHarnessOptions(options: JsonObject | undefined | null): ClaudeHarnessOptions {
  const { parsed, problems } = check(options ?? {});
  if (problems.length > 0) throw new HarnessOptionsError(problems);
  return parsed;
}

function check(options: JsonObject): { parsed: ClaudeHarnessOptions; problems: HarnessOptionProblem[] } {
  const problems: HarnessOptionProblem[] = [];
  const parsed: ClaudeHarnessOptions = {
    tools: [...DEFAULT_TOOLS],
    permissionMode: "default",
    systemPrompt: "append",
    maxBudgetUsd: undefined,
    requiresApproval: [],
  };

  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.includes(key)) {
      problems.push({ option: key, message: `unknown option; this harness understands ${KNOWN_OPTIONS.join(", ")}` });
    }
  }

  const tools = options["tools"];
  if (tools !== undefined && tools !== null) {
    if (!Array.isArray(tools) || !tools.every((t) => typeof t === "string")) {
      problems.push({ option: "tools", message: `must be a list of tool names, got ${describe(tools)}` });
    } else {
      const unsupported = tools.filter((t) => !oneOf(SUPPORTED_TOOLS, t));
      if (unsupported.length > 0) {
        problems.push({
          option: "tools",
          message: `${unsupported.join(", ")} ${unsupported.length === 1 ? "is" : "are"} not supported; choose from ${SUPPORTED_TOOLS.join(", ")}`,
        });
      } else {
        parsed.tools = [...new Set(tools as SupportedTool[])];
      }
    }
  }

  const mode = options["permission_mode"];
  if (mode !== undefined && mode !== null) {
    if (oneOf(PERMISSION_MODES, mode)) parsed.permissionMode = mode;
    else
      problems.push({
        option: "permission_mode",
        message: `must be one of ${PERMISSION_MODES.join(", ")}, got ${describe(mode)}`,
      });
  }

  const systemPrompt = options["system_prompt"];
  if (systemPrompt !== undefined && systemPrompt !== null) {
    if (oneOf(SYSTEM_PROMPT_MODES, systemPrompt)) parsed.systemPrompt = systemPrompt;
    else
      problems.push({ option: "system_prompt", message: `must be append or replace, got ${describe(systemPrompt)}` });
  }

  const budget = options["max_budget_usd"];
  if (budget !== undefined && budget !== null) {
    if (typeof budget === "number" && Number.isFinite(budget) && budget > 0) parsed.maxBudgetUsd = budget;
    else
      problems.push({
        option: "max_budget_usd",
        message: `must be a positive number of US dollars, got ${describe(budget)}`,
      });
  }

  const approval = options["requires_approval"];
  if (approval !== undefined && approval !== null) {
    if (!Array.isArray(approval) || !approval.every((t) => typeof t === "string")) {
      problems.push({
        option: "requires_approval",
        message: `must be a list of tool names, got ${describe(approval)}`,
      });
    } else {
      const unknown = approval.filter((t) => !oneOf(SUPPORTED_TOOLS, t));
      if (unknown.length > 0) {
        problems.push({
          option: "requires_approval",
          message: `${unknown.join(", ")} not supported; choose from ${SUPPORTED_TOOLS.join(", ")}`,
        });
      } else {
        parsed.requiresApproval = approval as string[];
      }
    }
  }

  return { parsed, problems };
}
