// Presets: ACP agents this harness knows how to start and configure, so an
// agent definition can say `harness: { agent: claude }` instead of a command.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
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
  workingDir: string;
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
  /** Rewrites the session input so the agent reads it as plain text (no commands, no file mentions). */
  inertInput?: (input: string) => string;
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

/**
 * The claude preset's tools when `harness.tools` does not name them, as
 * harness-claude's: Claude Code's other tools include some that allow
 * themselves (EnterPlanMode, ToolSearch, the task tools), which would then
 * run without asking.
 */
export const CLAUDE_DEFAULT_TOOLS = ["Read", "Write", "Edit", "Glob", "Grep", "Bash"];

/**
 * Git configuration that runs commands, overridden in Claude Code's
 * environment (`GIT_CONFIG_*` wins over a repository's `.git/config`): Claude
 * Code 2.1.83 runs `git status` and `git log` in the working directory at
 * start, unasked. The keys newer Claude Code passes as `-c` to its own git
 * calls that a repository could use to run something; a driver a repository
 * names itself (a filter, a diff driver) cannot be switched off by key name,
 * so such a repository is refused (checkClaudeGitConfig).
 */
export const CLAUDE_GIT_CONFIG: ReadonlyArray<readonly [string, string]> = [
  ["core.fsmonitor", ""],
  ["core.hooksPath", "/dev/null"],
  ["log.showSignature", "false"],
  ["core.askPass", ""],
  ["protocol.ext.allow", "never"],
  ["diff.external", ""],
  ["core.sshCommand", ""],
];

/**
 * Repository settings that make Claude Code's start-up `git status` run a
 * program the environment above cannot switch off: a filter driver, which a
 * `.gitattributes` applies to the files status looks at, is named by the
 * repository itself. (A signature program is off with log.showSignature;
 * hooks, fsmonitor and the rest are overridden; diff drivers run only in a
 * git command the runtime allowed.)
 */
const GIT_PROGRAM_KEYS = /^filter\..+\.(clean|smudge|process)$/i;

/**
 * Refuses a working directory whose repository's own configuration (its
 * `config` and what that includes) names a filter program: Claude Code 2.1.83
 * runs `git status` there at start, asking nobody, and a filter that a
 * `.gitattributes` applies would run then (a review ran one). Read with
 * `git config --list`, which runs nothing.
 */
export function checkClaudeGitConfig(workingDir: string): void {
  if (!existsSync(path.join(workingDir, ".git"))) return;
  let listed: string;
  try {
    listed = execFileSync(
      "git",
      ["--git-dir", path.join(workingDir, ".git"), "config", "--local", "--includes", "--name-only", "--list"],
      {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
        timeout: 10_000,
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      },
    );
  } catch (error) {
    // No git here: Claude Code's git calls cannot run either.
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw new Error(
      `${path.join(workingDir, ".git")} could not be read as a repository (${(error as Error).message.split("\n")[0]}), so this harness cannot tell whether Claude Code's own git calls would run a program it names; fix or remove it before running this agent here`,
    );
  }
  const found = listed.split("\n").find((key) => GIT_PROGRAM_KEYS.test(key.trim()));
  if (found !== undefined)
    throw new Error(
      `${path.join(workingDir, ".git")}'s configuration sets ${found.trim()}, a program git runs; Claude Code runs git status here at start without asking, so remove that setting (git config --unset ${found.trim()}) before running this agent here`,
    );
}

function gitConfigEnv(entries: ReadonlyArray<readonly [string, string]>): Record<string, string> {
  const env: Record<string, string> = { GIT_CONFIG_COUNT: String(entries.length) };
  entries.forEach(([key, value], i) => {
    env[`GIT_CONFIG_KEY_${i}`] = key;
    env[`GIT_CONFIG_VALUE_${i}`] = value;
  });
  return env;
}

/**
 * claude-agent-acp reads `permissions.defaultMode` from the working
 * directory's `.claude/settings.json` and `.claude/settings.local.json`
 * whatever `settingSources` says, and runs the session in that mode
 * (`acceptEdits` writes unasked, `bypassPermissions` runs everything unasked).
 * Such a working directory is refused before the agent starts.
 */
export function checkClaudeProjectSettings(workingDir: string): void {
  for (const name of ["settings.json", "settings.local.json"]) {
    const file = path.join(workingDir, ".claude", name);
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    let mode: unknown;
    try {
      const settings = JSON.parse(text) as { permissions?: { defaultMode?: unknown } } | null;
      mode = settings?.permissions?.defaultMode;
    } catch {
      throw new Error(
        `${file} is not valid JSON, so this harness cannot tell which permission mode claude-agent-acp would take from it; fix or remove it (or its permissions.defaultMode) before running this agent here`,
      );
    }
    if (mode !== undefined && mode !== "default")
      throw new Error(
        `${file} sets permissions.defaultMode ${JSON.stringify(mode)}, which claude-agent-acp would run this session in (tool calls without asking); remove permissions.defaultMode from it before running this agent here`,
      );
  }
}

/** U+200B ZERO WIDTH SPACE: not whitespace to Claude Code's mention and command parsing, invisible to the model. */
const ZWSP = "\u200b";

/**
 * The input as plain text for Claude Code 2.1.83, which has no verbatim
 * prompt option: an input starting with `/` would run a slash command, and
 * `@path` (at the start or after whitespace) reads that file into the
 * context unasked. A zero-width space before the `/` and before each such
 * `@` makes neither match, and leaves the text as the model reads it.
 */
export function inertClaudeCodeInput(input: string): string {
  const mentionsInert = input.replace(/(^|\s)@/gu, `$1${ZWSP}@`);
  return /^\s*\//u.test(mentionsInert) ? `${ZWSP}${mentionsInert}` : mentionsInert;
}

/** The launch settings of a preset for one session. */
export function presetLaunch(name: AgentPresetName, context: PresetContext): AgentLaunch {
  switch (name) {
    case "claude": {
      checkClaudeProjectSettings(context.workingDir);
      checkClaudeGitConfig(context.workingDir);
      const tools = context.tools ?? CLAUDE_DEFAULT_TOOLS;
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
          // No repository config runs a command in Claude Code's own (unasked) git calls.
          ...gitConfigEnv(CLAUDE_GIT_CONFIG),
        },
        // claude-agent-acp reads `_meta.systemPrompt` and passes `_meta.claudeCode.options`
        // to the Claude Agent SDK: no user, project or local settings, the turn limit,
        // and flag settings (`--settings`) that make the read-only tools ask too and
        // keep bypassPermissions off.
        sessionMeta: {
          ...(context.instructions.trim() !== "" ? { systemPrompt: { append: context.instructions } } : {}),
          claudeCode: {
            options: {
              settingSources: [],
              // Every tool of the session asks: Claude Code's default mode lets Read, Glob, Grep and
              // read-only Bash commands (ls, git status, git diff) run unasked.
              settings: { permissions: { ask: tools, disableBypassPermissionsMode: "disable" } },
              ...(context.maxTurns > 0 ? { maxTurns: context.maxTurns } : {}),
              tools,
            },
          },
        },
        instructionsInPrompt: false,
        inertInput: inertClaudeCodeInput,
      };
    }
  }
}
