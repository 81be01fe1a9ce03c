// The session request as the Claude Agent SDK's query() options.
import type { Options } from "@anthropic-ai/claude-agent-sdk";
import { modelEndpointFrom } from "@oz0/harness";
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { ClaudeHarnessOptions } from "./harness-options.js";
import { buildSessionEnvironment } from "./session-environment.js";

/** Thrown when the request itself (not the harness options) cannot run in Claude Code. */
export class SessionRequestError extends Error {
  readonly code = "invalid_session_request";
  constructor(message: string) {
    super(message);
    this.name = "SessionRequestError";
  }
}

/** `anthropic/claude-sonnet-5-5` → `claude-sonnet-5-5`; a model of another provider is refused. */
export function claudeModelName(model: string): string {
  const slash = model.indexOf("/");
  if (slash < 0) return model;
  const provider = model.slice(0, slash);
  if (provider !== "anthropic") {
    throw new SessionRequestError(
      `model ${model} is not an Anthropic model; the claude-agent-sdk harness only runs anthropic/<model>`,
    );
  }
  return model.slice(slash + 1);
}

export interface QueryOptionsInput {
  request: SessionRequest;
  harness: ClaudeHarnessOptions;
  inheritedEnv: NodeJS.ProcessEnv;
  /** Hooks and callbacks from the permission gate and the runtime tool server. */
  extra: Pick<Options, "canUseTool" | "hooks" | "mcpServers" | "toolAliases" | "abortController" | "stderr">;
  /** Defaults to the binary the SDK ships. */
  pathToClaudeCodeExecutable?: string;
}

export function buildQueryOptions(input: QueryOptionsInput): Options {
  const { request, harness } = input;
  // The endpoint adds Oz0-Job / Oz0-Agent from the request should the runtime have left them out.
  const endpoint = modelEndpointFrom(request);
  if (!endpoint.anthropicBaseUrl)
    throw new SessionRequestError(
      "the request has no llm.anthropic_base_url; Claude Code needs an Anthropic Messages endpoint (the LLM proxy)",
    );
  if (!endpoint.apiKey)
    throw new SessionRequestError("the request has no llm.token; model calls need the session token");
  if (!request.workingDir) throw new SessionRequestError("the request has no working_dir");
  if (!request.stateDir)
    throw new SessionRequestError("the request has no state_dir; HOME and CLAUDE_CONFIG_DIR live there");
  const primary = request.model?.primary ?? "";
  if (!primary) throw new SessionRequestError("the request has no model.primary");

  const instructions = request.instructions.trim();
  let systemPrompt: Options["systemPrompt"];
  if (harness.systemPrompt === "replace") {
    if (!instructions)
      throw new SessionRequestError(
        "harness.system_prompt is replace but the agent has no instructions to replace the system prompt with",
      );
    systemPrompt = instructions;
  } else {
    systemPrompt = { type: "preset", preset: "claude_code", ...(instructions ? { append: instructions } : {}) };
  }

  const fallbacks = (request.model?.fallbacks ?? []).map(claudeModelName);
  const maxTurns = request.limits?.maxTurns ?? 0;
  const bypass = harness.permissionMode === "bypassPermissions";

  return {
    cwd: request.workingDir,
    model: claudeModelName(primary),
    ...(fallbacks.length > 0 ? { fallbackModel: fallbacks.join(",") } : {}),
    systemPrompt,
    tools: [...harness.tools],
    permissionMode: harness.permissionMode,
    ...(bypass ? { allowDangerouslySkipPermissions: true } : {}),
    ...(maxTurns > 0 ? { maxTurns } : {}),
    ...(harness.maxBudgetUsd !== undefined ? { maxBudgetUsd: harness.maxBudgetUsd } : {}),
    ...(request.outputSchema ? { outputFormat: { type: "json_schema", schema: request.outputSchema } } : {}),
    // No user, project or local settings, no CLAUDE.md, no MCP servers but ours,
    // nothing written for a later resume.
    settingSources: [],
    strictMcpConfig: true,
    // The input is the task as given, never a slash command or an `@path` to read: the input of a harness
    // operation's scratch session is the model's text, and both ran (git through the shell, a read of any file)
    // without a tool call to ask about.
    verbatimPrompts: true,
    persistSession: false,
    includePartialMessages: true,
    env: buildSessionEnvironment({
      stateDir: request.stateDir,
      anthropicBaseUrl: endpoint.anthropicBaseUrl,
      token: endpoint.apiKey,
      headers: { ...endpoint.extraHeaders },
      inherited: input.inheritedEnv,
      declareSandbox: bypass && process.getuid?.() === 0,
    }),
    ...(input.pathToClaudeCodeExecutable ? { pathToClaudeCodeExecutable: input.pathToClaudeCodeExecutable } : {}),
    ...input.extra,
  };
}
