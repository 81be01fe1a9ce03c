// The environment a harness gets on the real stack, built the way the sandbox
// builds it (services/sandbox/src/session-environment.ts), so a harness that
// reads its environment behaves in the kit as it will in production. A test
// compares the two.
import path from "node:path";
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";

/** Variables the sandbox sets so known harnesses and their tool chains stay quiet (no telemetry, no update checks). */
export const QUIET_HARNESS_ENV: Readonly<Record<string, string>> = {
  DISABLE_TELEMETRY: "1",
  DISABLE_AUTOUPDATER: "1",
  DISABLE_ERROR_REPORTING: "1",
  DISABLE_BUG_COMMAND: "1",
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
  CLAUDE_CODE_ENABLE_TELEMETRY: "0",
  CLAUDE_CODE_DISABLE_AUTO_MEMORY: "1",
  DO_NOT_TRACK: "1",
  NO_UPDATE_NOTIFIER: "1",
  NPM_CONFIG_UPDATE_NOTIFIER: "false",
  GEMINI_TELEMETRY_ENABLED: "false",
  OTEL_SDK_DISABLED: "true",
  NEXT_TELEMETRY_DISABLED: "1",
  DOTNET_CLI_TELEMETRY_OPTOUT: "1",
  HOMEBREW_NO_ANALYTICS: "1",
  CHECKPOINT_DISABLE: "1",
  PIP_DISABLE_PIP_VERSION_CHECK: "1",
};

/** The sandbox's default session PATH (`OZ0_SESSION_PATH`): the system's bin folders, and node's folder when it is elsewhere. */
export function defaultSessionPath(): string {
  const dirs = ["/usr/local/bin", "/usr/bin", "/bin"];
  const nodeDir = path.dirname(process.execPath);
  return (dirs.includes(nodeDir) ? dirs : [nodeDir, ...dirs]).join(":");
}

/** Folders under the state directory the environment points at; they exist before the harness starts. */
export function stateSubdirectories(stateDir: string): string[] {
  return ["home", "tmp", "config", "cache", "data", "state", "claude"].map((name) => path.join(stateDir, name));
}

/** What {@link sessionEnvironment} needs. */
export interface SessionEnvironmentInput {
  request: SessionRequest;
  /** The plugin's folder on the stack; the kit uses the directory it was started from. */
  pluginDir: string;
  /** Default {@link defaultSessionPath}. */
  path?: string;
  /** Default `C.UTF-8`, the sandbox's default. */
  locale?: string;
}

/**
 * The harness's whole environment, as the sandbox gives it: nothing
 * inherited; `HOME`, `TMPDIR` and the XDG folders inside the state
 * directory; `OZ0_*` naming the session; the LLM base URLs; and the session
 * token as `ANTHROPIC_API_KEY` / `OPENAI_API_KEY` (it is not a provider key).
 */
export function sessionEnvironment(input: SessionEnvironmentInput): Record<string, string> {
  const { request } = input;
  const stateDir = request.stateDir;
  const locale = input.locale ?? "C.UTF-8";
  const env: Record<string, string> = {
    ...QUIET_HARNESS_ENV,
    PATH: input.path ?? defaultSessionPath(),
    HOME: path.join(stateDir, "home"),
    USER: "oz0",
    LANG: locale,
    LC_ALL: locale,
    TMPDIR: path.join(stateDir, "tmp"),
    XDG_CONFIG_HOME: path.join(stateDir, "config"),
    XDG_CACHE_HOME: path.join(stateDir, "cache"),
    XDG_DATA_HOME: path.join(stateDir, "data"),
    XDG_STATE_HOME: path.join(stateDir, "state"),
    CLAUDE_CONFIG_DIR: path.join(stateDir, "claude"),
    OZ0_SESSION_ID: request.sessionId,
    OZ0_JOB_ID: request.jobId,
    OZ0_WORKING_DIR: request.workingDir,
    OZ0_STATE_DIR: stateDir,
    OZ0_PLUGIN_DIR: input.pluginDir,
  };
  const llm = request.llm;
  if (llm !== undefined && llm.anthropicBaseUrl !== "") {
    env.ANTHROPIC_BASE_URL = llm.anthropicBaseUrl;
    env.OZ0_ANTHROPIC_BASE_URL = llm.anthropicBaseUrl;
  }
  if (llm !== undefined && llm.openaiBaseUrl !== "") {
    env.OPENAI_BASE_URL = llm.openaiBaseUrl;
    env.OZ0_OPENAI_BASE_URL = llm.openaiBaseUrl;
  }
  if (llm !== undefined && llm.token !== "") {
    env.OZ0_LLM_TOKEN = llm.token;
    env.ANTHROPIC_API_KEY = llm.token;
    env.OPENAI_API_KEY = llm.token;
  }
  if (llm !== undefined && Object.keys(llm.headers).length > 0) {
    const names = Object.keys(llm.headers).sort();
    env.OZ0_LLM_HEADERS = JSON.stringify(Object.fromEntries(names.map((name) => [name, llm.headers[name]])));
    env.ANTHROPIC_CUSTOM_HEADERS = names.map((name) => `${name}: ${llm.headers[name] ?? ""}`).join("\n");
  }
  if (request.trace !== undefined && request.trace.traceparent !== "") {
    env.TRACEPARENT = request.trace.traceparent;
    if (request.trace.tracestate !== "") env.TRACESTATE = request.trace.tracestate;
  }
  return env;
}
