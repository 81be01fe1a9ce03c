// The environment of the Claude Code process, built from scratch: the SDK's
// `env` replaces the inherited one, so nothing of the node's environment
// (least of all a provider key) reaches the binary unless listed here.
import path from "node:path";

/**
 * Inherited variables the binary needs to run commands sensibly; nothing else
 * is passed on, so ANTHROPIC_API_KEY and every other credential the harness
 * process may hold stay behind.
 */
const INHERITED = ["PATH", "LANG", "LC_ALL", "TZ", "TMPDIR"] as const;

const FALLBACK_PATH = "/usr/local/bin:/usr/bin:/bin";

export interface SessionEnvironmentOptions {
  /** The session's private state directory; HOME and CLAUDE_CONFIG_DIR live here. */
  stateDir: string;
  /** Base URL of the Anthropic Messages API to call (the LLM proxy). */
  anthropicBaseUrl: string;
  /** The session token, sent as the API key. Not a provider key. */
  token: string;
  /** Headers for every model call (Oz0-Job, Oz0-Agent, ...). */
  headers: Record<string, string>;
  /** The environment the harness process inherited; read for INHERITED only. */
  inherited: NodeJS.ProcessEnv;
  /**
   * Claude Code refuses bypassPermissions as root unless it is told it runs in
   * a sandbox. Set only when the session asked for bypassPermissions; every
   * call still goes through the runtime's policy (see permission-gate.ts).
   */
  declareSandbox: boolean;
}

/** Where the session's HOME and Claude Code configuration live, inside the state directory. */
export function stateLayout(stateDir: string): { home: string; configDir: string; tmp: string } {
  return {
    home: path.join(stateDir, "home"),
    configDir: path.join(stateDir, "claude"),
    tmp: path.join(stateDir, "tmp"),
  };
}

/**
 * `ANTHROPIC_CUSTOM_HEADERS`: one `Name: Value` per line. A name or value with
 * a line break would smuggle in another header, so it is refused.
 */
export function customHeaders(headers: Record<string, string>): string {
  return Object.entries(headers)
    .map(([name, value]) => {
      if (!/^[A-Za-z0-9!#$%&'*+.^_`|~-]+$/.test(name))
        throw new Error(`llm header name ${JSON.stringify(name)} is not a valid HTTP header name`);
      if (/[\r\n]/.test(value)) throw new Error(`llm header ${name} has a line break in its value`);
      return `${name}: ${value}`;
    })
    .join("\n");
}

export function buildSessionEnvironment(options: SessionEnvironmentOptions): Record<string, string> {
  const { home, configDir, tmp } = stateLayout(options.stateDir);
  const env: Record<string, string> = {};
  for (const name of INHERITED) {
    const value = options.inherited[name];
    if (value !== undefined && value !== "") env[name] = value;
  }
  env["PATH"] ??= FALLBACK_PATH;
  Object.assign(env, {
    HOME: home,
    CLAUDE_CONFIG_DIR: configDir,
    // Claude Code's own scratch files (sockets, notes) stay in the session's state too.
    CLAUDE_CODE_TMPDIR: tmp,
    ANTHROPIC_BASE_URL: options.anthropicBaseUrl,
    ANTHROPIC_API_KEY: options.token,
    ANTHROPIC_CUSTOM_HEADERS: customHeaders(options.headers),
    // No update checks, telemetry, error reports, surveys or other side calls:
    // the session's only traffic is its model calls to the proxy.
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    DISABLE_TELEMETRY: "1",
    CLAUDE_CODE_ENABLE_TELEMETRY: "0",
    DISABLE_ERROR_REPORTING: "1",
    // No memory carried from one session to the next.
    CLAUDE_CODE_DISABLE_AUTO_MEMORY: "1",
    DISABLE_BUG_COMMAND: "1",
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY: "1",
    // The seed promises at most five attempts per call from inside the session.
    CLAUDE_CODE_MAX_RETRIES: "4",
    CLAUDE_AGENT_SDK_CLIENT_APP: "oz0-harness-claude",
  });
  if (options.declareSandbox) env["IS_SANDBOX"] = "1";
  return env;
}
