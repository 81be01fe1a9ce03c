// The ACP agent's environment, built from scratch: nothing of the harness's
// environment reaches the agent (least of all a provider key) unless listed
// here, and the model endpoint is the session's (the LLM proxy).
import path from "node:path";
import type { ModelEndpoint } from "@oz0/harness";

/** Inherited variables an agent needs to run commands sensibly; nothing else is passed on. */
const INHERITED = ["PATH", "LANG", "LC_ALL", "TZ"] as const;
const FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin";

export interface AgentEnvironmentOptions {
  /** The session's private state directory; HOME and TMPDIR live there. */
  stateDir: string;
  endpoint: ModelEndpoint;
  /** Which provider variables to set: the ones the agent's model client reads. */
  modelEnv: "anthropic" | "openai" | "none";
  /** The preset's or the agent definition's variables; `{llm.*}` placeholders are filled in. */
  extra: Record<string, string>;
  /** The environment the harness inherited; read for PATH, LANG, LC_ALL and TZ only. */
  inherited: NodeJS.ProcessEnv;
}

/** Where HOME and TMPDIR of the agent live inside the state directory. */
export function agentStateLayout(stateDir: string): { home: string; tmp: string } {
  return { home: path.join(stateDir, "home"), tmp: path.join(stateDir, "tmp") };
}

/**
 * `ANTHROPIC_CUSTOM_HEADERS`: one `Name: Value` per line. A name or value
 * with a line break would smuggle in another header, so it is refused.
 */
export function customHeaderLines(headers: Readonly<Record<string, string>>): string {
  return Object.entries(headers)
    .map(([name, value]) => {
      if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name))
        throw new Error(`llm header name ${JSON.stringify(name)} is not a valid HTTP header name`);
      if (/[\r\n]/.test(value)) throw new Error(`llm header ${name} has a line break in its value`);
      return `${name}: ${value}`;
    })
    .join("\n");
}

/** Fills `{llm.token}`, `{llm.anthropic_base_url}`, `{llm.openai_base_url}` and `{llm.model}`. */
export function fillPlaceholders(value: string, endpoint: ModelEndpoint): string {
  return value
    .replaceAll("{llm.token}", endpoint.apiKey)
    .replaceAll("{llm.anthropic_base_url}", endpoint.anthropicBaseUrl)
    .replaceAll("{llm.openai_base_url}", endpoint.openaiBaseUrl)
    .replaceAll("{llm.model}", endpoint.model);
}

export function buildAgentEnvironment(options: AgentEnvironmentOptions): Record<string, string> {
  const { endpoint } = options;
  const { home, tmp } = agentStateLayout(options.stateDir);
  const env: Record<string, string> = {};
  for (const name of INHERITED) {
    const value = options.inherited[name];
    if (value !== undefined && value !== "") env[name] = value;
  }
  env["PATH"] ??= FALLBACK_PATH;
  env["HOME"] = home;
  env["TMPDIR"] = tmp;
  // Any agent can find the endpoint here, whatever its provider variables are called.
  Object.assign(env, {
    OZ0_LLM_ANTHROPIC_BASE_URL: endpoint.anthropicBaseUrl,
    OZ0_LLM_OPENAI_BASE_URL: endpoint.openaiBaseUrl,
    OZ0_LLM_TOKEN: endpoint.apiKey,
    OZ0_LLM_HEADERS: JSON.stringify(endpoint.extraHeaders),
    OZ0_LLM_MODEL: endpoint.model,
  });
  if (options.modelEnv === "anthropic") {
    Object.assign(env, {
      ANTHROPIC_BASE_URL: endpoint.anthropicBaseUrl,
      ANTHROPIC_API_KEY: endpoint.apiKey,
      ANTHROPIC_CUSTOM_HEADERS: customHeaderLines(endpoint.extraHeaders),
    });
  } else if (options.modelEnv === "openai") {
    // OpenAI clients have no standard variable for extra headers; such agents
    // must read OZ0_LLM_HEADERS (or the proxy must accept the token alone).
    Object.assign(env, { OPENAI_BASE_URL: endpoint.openaiBaseUrl, OPENAI_API_KEY: endpoint.apiKey });
  }
  for (const [name, value] of Object.entries(options.extra)) env[name] = fillPlaceholders(value, endpoint);
  return env;
}
