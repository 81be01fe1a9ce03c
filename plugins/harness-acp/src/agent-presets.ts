// Presets: ACP agents this harness knows how to start and configure, so an
// agent definition can say `harness: { agent: claude }` instead of a command.
import path from "node:path";
import { createRequire } from "node:module";

export const AGENT_PRESET_NAMES = ["claude"] as const;
export type AgentPresetName = (typeof AGENT_PRESET_NAMES)[number];

export function isAgentPresetName(name: string): name is AgentPresetName {
  return (AGENT_PRESET_NAMES as readonly string[]).includes(name);
}

/** What the session knows when it asks a preset for its settings. */
export interface PresetContext {
  stateDir: string;
  instructions: string;
  maxTurns: number;
  model: string;
  /** The agent's `harness.tools`, when it restricts them. */
  tools: string[] | undefined;
}

/** How to start and configure one agent. */
export interface AgentLaunch {
  command: string[];
  /** Variables added after the model endpoint's (they win). */
  env: Record<string, string>;
  modelEnv: "anthropic" | "openai" | "none";
  /** `_meta` of `session/new`, for agents that read settings there. */
  sessionMeta?: Record<string, unknown>;
  /** False when the preset hands the instructions over as a system prompt instead. */
  instructionsInPrompt: boolean;
}

/** Thrown when a preset's agent is not installed next to the plugin. */
export class AgentNotInstalledError extends Error {
  readonly code = "agent_not_installed";
}

/** `@zed-industries/claude-agent-acp`'s entry point, resolved from this plugin's dependencies. */
export function claudeAgentAcpEntry(): string {
  try {
    return createRequire(import.meta.url).resolve("@zed-industries/claude-agent-acp/dist/index.js");
  } catch {
    throw new AgentNotInstalledError(
      "harness.agent claude needs @zed-industries/claude-agent-acp installed next to the acp harness plugin (npm install @zed-industries/claude-agent-acp)",
    );
  }
}

/** The launch settings of a preset for one session. */
export function presetLaunch(name: AgentPresetName, context: PresetContext): AgentLaunch {
  switch (name) {
    case "claude": {
      const configDir = path.join(context.stateDir, "claude");
      return {
        command: [process.execPath, claudeAgentAcpEntry()],
        modelEnv: "anthropic",
        env: {
          // Claude Code's configuration, scratch files and sessions stay in the state directory.
          CLAUDE_CONFIG_DIR: configDir,
          CLAUDE_CODE_TMPDIR: path.join(context.stateDir, "tmp"),
          // claude-agent-acp switches to the first model of Claude Code's list (an alias
          // such as `default` or `sonnet`); pinning every alias keeps the session on the
          // model the agent definition names.
          ...(context.model !== ""
            ? {
                ANTHROPIC_MODEL: context.model,
                ANTHROPIC_DEFAULT_SONNET_MODEL: context.model,
                ANTHROPIC_DEFAULT_OPUS_MODEL: context.model,
                ANTHROPIC_DEFAULT_HAIKU_MODEL: context.model,
                ANTHROPIC_SMALL_FAST_MODEL: context.model,
              }
            : {}),
          // Offline apart from the model calls: no update checks, telemetry, error reports or surveys.
          CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
          DISABLE_AUTOUPDATER: "1",
          DISABLE_TELEMETRY: "1",
          CLAUDE_CODE_ENABLE_TELEMETRY: "0",
          DISABLE_ERROR_REPORTING: "1",
          DISABLE_BUG_COMMAND: "1",
          CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: "1",
          // No memory carried from one session to the next.
          CLAUDE_CODE_DISABLE_AUTO_MEMORY: "1",
          // At most five attempts per model call from inside the session, as for harness-claude.
          CLAUDE_CODE_MAX_RETRIES: "4",
        },
        // claude-agent-acp reads `_meta.systemPrompt` and passes `_meta.claudeCode.options`
        // to the Claude Agent SDK: no user, project or local settings, and the turn limit.
        sessionMeta: {
          ...(context.instructions.trim() !== "" ? { systemPrompt: { append: context.instructions } } : {}),
          claudeCode: {
            options: {
              settingSources: [],
              ...(context.maxTurns > 0 ? { maxTurns: context.maxTurns } : {}),
              ...(context.tools !== undefined ? { tools: context.tools } : {}),
            },
          },
        },
        instructionsInPrompt: false,
      };
    }
  }
}
