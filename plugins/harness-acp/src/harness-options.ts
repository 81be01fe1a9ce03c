// The agent's `harness:` options for the acp harness: which ACP agent to run
// and with what environment. Checked before anything starts, so a wrong
// option ends the session with an error that names it.
import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { AGENT_PRESET_NAMES, isAgentPresetName } from "./agent-presets.js";
import type { AgentPresetName } from "./agent-presets.js";

/** Where the agent reads the model endpoint from; see README.md. */
export const MODEL_ENV_STYLES = ["anthropic", "openai", "none"] as const;
export type ModelEnvStyle = (typeof MODEL_ENV_STYLES)[number];

/** The agent to start: a preset, or a command of the agent's own. */
export type AgentSpec =
  | { kind: "preset"; preset: AgentPresetName }
  | {
      kind: "command";
      /** argv; the first element is the program, looked up on PATH. */
      command: string[];
      /** Extra variables; values may hold `{llm.*}` placeholders (README.md). */
      env: Record<string, string>;
      /** Which provider variables to set from the session's endpoint. */
      modelEnv: ModelEnvStyle;
    };

/** The options this harness understands, with defaults applied. */
export interface AcpHarnessOptions {
  agent: AgentSpec;
  /** Read by the runtime's policy (tools that wait for a person), not by this harness. */
  requiresApproval: string[];
  /** The built-in tools the agent may use; only presets that can restrict them accept it. */
  tools: string[] | undefined;
}

/** One problem with one option. */
export interface HarnessOptionProblem {
  /** The option's path as the agent writes it, for example `agent.command`. */
  option: string;
  message: string;
}

/** Thrown by {@link parseHarnessOptions}; the message names every bad option. */
export class HarnessOptionsError extends Error {
  readonly code = "invalid_harness_options";
  constructor(readonly problems: HarnessOptionProblem[]) {
    super(`invalid harness options for acp: ${problems.map((p) => `harness.${p.option}: ${p.message}`).join("; ")}`);
    this.name = "HarnessOptionsError";
  }
}

const KNOWN_OPTIONS = ["agent", "requires_approval", "tools"];

/**
 * Claude Code tools claude-agent-acp never announces as a tool call: every
 * tool of the session asks, and a permission request for a call never
 * announced ends the session (unannounced_tool_call).
 */
const UNASKABLE_CLAUDE_TOOLS = new Set(["TodoWrite"]);
const KNOWN_AGENT_OPTIONS = ["command", "env", "model_env"];

/** Placeholders a value in `agent.env` may use; filled from the session request. */
export const ENV_PLACEHOLDERS = [
  "{llm.token}",
  "{llm.anthropic_base_url}",
  "{llm.openai_base_url}",
  "{llm.model}",
] as const;

/**
 * Variable names that carry credentials. An agent's `env` may set one only to
 * exactly `{llm.token}`: a literal there would be a provider key in an
 * agent definition, which no session may hold.
 */
const CREDENTIAL_NAME = /(API_KEY|AUTH_TOKEN|ACCESS_KEY|SECRET|CREDENTIALS|_TOKEN)$/i;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

function describe(value: JsonValue | undefined): string {
  return JSON.stringify(value) ?? "undefined";
}

/** Every problem with `options`, or an empty list when they are valid. Reads nothing else. */
export function validateHarnessOptions(
  options: JsonObject | undefined | null,
  defaultAgent?: AgentSpec,
): HarnessOptionProblem[] {
  return check(options ?? {}, defaultAgent).problems;
}

/**
 * The options with defaults applied; throws {@link HarnessOptionsError}.
 * `defaultAgent` (main.js's `--agent` or `--agent-command`) is used when the options name no agent.
 */
export function parseHarnessOptions(
  options: JsonObject | undefined | null,
  defaultAgent?: AgentSpec,
): AcpHarnessOptions {
  const { parsed, problems } = check(options ?? {}, defaultAgent);
  if (problems.length > 0 || parsed === undefined) throw new HarnessOptionsError(problems);
  return parsed;
}

function check(
  options: JsonObject,
  defaultAgent: AgentSpec | undefined,
): { parsed: AcpHarnessOptions | undefined; problems: HarnessOptionProblem[] } {
  const problems: HarnessOptionProblem[] = [];
  for (const key of Object.keys(options)) {
    if (!KNOWN_OPTIONS.includes(key))
      problems.push({ option: key, message: `unknown option; this harness understands ${KNOWN_OPTIONS.join(", ")}` });
  }

  let requiresApproval: string[] = [];
  const approval = options["requires_approval"];
  if (approval !== undefined && approval !== null) {
    if (Array.isArray(approval) && approval.every((t): t is string => typeof t === "string"))
      requiresApproval = approval;
    else
      problems.push({
        option: "requires_approval",
        message: `must be a list of tool names, got ${describe(approval)}`,
      });
  }

  const agent = checkAgent(options["agent"], defaultAgent, problems);
  let tools: string[] | undefined;
  const rawTools = options["tools"];
  if (rawTools !== undefined && rawTools !== null) {
    if (!Array.isArray(rawTools) || !rawTools.every((t): t is string => typeof t === "string")) {
      problems.push({ option: "tools", message: `must be a list of tool names, got ${describe(rawTools)}` });
    } else if (agent !== undefined && agent.kind !== "preset") {
      // A command agent's tools are its own business; ACP cannot restrict them.
      problems.push({
        option: "tools",
        message:
          "only the claude preset can restrict its tools; an agent command decides its own (every call still asks permission)",
      });
    } else {
      const unaskable = rawTools.find((t) => UNASKABLE_CLAUDE_TOOLS.has(t));
      if (unaskable !== undefined)
        problems.push({
          option: "tools",
          message: `${unaskable}: claude-agent-acp reports its calls as a plan update, never as a tool call, so this harness cannot ask the runtime about one and the session would fail at the first; leave it out`,
        });
      else tools = rawTools;
    }
  }
  return { parsed: agent === undefined ? undefined : { agent, requiresApproval, tools }, problems };
}

function checkAgent(
  value: JsonValue | undefined,
  defaultAgent: AgentSpec | undefined,
  problems: HarnessOptionProblem[],
): AgentSpec | undefined {
  const presets = AGENT_PRESET_NAMES.join(", ");
  if (value === undefined || value === null) {
    if (defaultAgent !== undefined) return defaultAgent;
    problems.push({
      option: "agent",
      message: `is required: a preset (${presets}) or { command: [program, ...args], env: {...} }`,
    });
    return undefined;
  }
  if (typeof value === "string") {
    if (isAgentPresetName(value)) return { kind: "preset", preset: value };
    problems.push({
      option: "agent",
      message: `${describe(value)} is not a preset; choose from ${presets}, or give { command: [...] }`,
    });
    return undefined;
  }
  if (typeof value !== "object" || Array.isArray(value)) {
    problems.push({
      option: "agent",
      message: `must be a preset name or an object with a command, got ${describe(value)}`,
    });
    return undefined;
  }
  const before = problems.length;
  for (const key of Object.keys(value)) {
    if (!KNOWN_AGENT_OPTIONS.includes(key))
      problems.push({
        option: `agent.${key}`,
        message: `unknown option; an agent has ${KNOWN_AGENT_OPTIONS.join(", ")}`,
      });
  }
  const command = value["command"];
  if (
    !Array.isArray(command) ||
    command.length === 0 ||
    !command.every((part): part is string => typeof part === "string" && part !== "")
  ) {
    problems.push({
      option: "agent.command",
      message: `must be a non-empty list of strings (program, then arguments), got ${describe(command)}`,
    });
  }
  const env: Record<string, string> = {};
  const rawEnv = value["env"];
  if (rawEnv !== undefined && rawEnv !== null) {
    if (typeof rawEnv !== "object" || Array.isArray(rawEnv)) {
      problems.push({
        option: "agent.env",
        message: `must be a map of variable names to strings, got ${describe(rawEnv)}`,
      });
    } else {
      for (const [name, v] of Object.entries(rawEnv)) {
        if (!ENV_NAME.test(name))
          problems.push({ option: `agent.env.${name}`, message: "is not a valid environment variable name" });
        else if (typeof v !== "string")
          problems.push({ option: `agent.env.${name}`, message: `must be a string, got ${describe(v)}` });
        else if (CREDENTIAL_NAME.test(name) && v !== "{llm.token}") {
          problems.push({
            option: `agent.env.${name}`,
            message: "looks like a credential; set it to {llm.token} (the session token), never to a key",
          });
        } else env[name] = v;
      }
    }
  }
  let modelEnv: ModelEnvStyle = "anthropic";
  const rawStyle = value["model_env"];
  if (rawStyle !== undefined && rawStyle !== null) {
    if (typeof rawStyle === "string" && (MODEL_ENV_STYLES as readonly string[]).includes(rawStyle))
      modelEnv = rawStyle as ModelEnvStyle;
    else
      problems.push({
        option: "agent.model_env",
        message: `must be one of ${MODEL_ENV_STYLES.join(", ")}, got ${describe(rawStyle)}`,
      });
  }
  if (problems.length > before) return undefined;
  return { kind: "command", command: command as string[], env, modelEnv };
}
