// The harness's whole environment, built from an allowlist: nothing of the
// runtime's own environment is inherited, so a provider key or an internal
// token set on the node can never reach a session. The one definition: the
// sandbox builds every session's environment with it, and the conformance kit
// gives a harness the very same one.
import path from "node:path";
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";

/** Variables known harnesses and their tool chains honour to stay quiet: no telemetry, no update checks, no error reporting. */
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

export interface SessionEnvironmentOptions {
  request: SessionRequest;
  workingDir: string;
  stateDir: string;
  pluginDir: string;
  /** The session's PATH (never the sandbox's own). */
  path: string;
  /** LANG / LC_ALL for the session. */
  locale: string;
  /**
   * The LLM base URLs as the harness must use them: the request's own, or
   * the in-sandbox forwarder's under bubblewrap.
   */
  anthropicBaseUrl: string;
  openaiBaseUrl: string;
  /**
   * Where the harness exports its spans (OTLP/HTTP traces), as the harness
   * reaches it (the sandbox's relay to the collector), and in which encoding
   * (the collector's). Unset: the harness's OpenTelemetry stays off
   * (OTEL_SDK_DISABLED).
   */
  otlpTraces?: { endpoint: string; protocol: "http/protobuf" | "http/json" };
}

/** The default session PATH (the sandbox's OZ0_SESSION_PATH): the system's bin folders, and node's folder when it is elsewhere. */
export function defaultSessionPath(): string {
  const dirs = ["/usr/local/bin", "/usr/bin", "/bin"];
  const nodeDir = path.dirname(process.execPath);
  return (dirs.includes(nodeDir) ? dirs : [nodeDir, ...dirs]).join(":");
}

/** Directories under the state directory the environment points at; created before the harness starts. */
export function stateSubdirectories(stateDir: string): string[] {
  return ["home", "tmp", "config", "cache", "data", "state", "claude"].map((name) => path.join(stateDir, name));
}

export function buildSessionEnvironment(options: SessionEnvironmentOptions): Record<string, string> {
  const { request, stateDir } = options;
  const home = path.join(stateDir, "home");
  const env: Record<string, string> = {
    ...QUIET_HARNESS_ENV,
    PATH: options.path,
    HOME: home,
    USER: "oz0",
    LANG: options.locale,
    LC_ALL: options.locale,
    TMPDIR: path.join(stateDir, "tmp"),
    // Harnesses keep settings and memory under these; pointing them into the
    // private state directory is what gives "no user settings, no memory".
    XDG_CONFIG_HOME: path.join(stateDir, "config"),
    XDG_CACHE_HOME: path.join(stateDir, "cache"),
    XDG_DATA_HOME: path.join(stateDir, "data"),
    XDG_STATE_HOME: path.join(stateDir, "state"),
    CLAUDE_CONFIG_DIR: path.join(stateDir, "claude"),
    OZ0_SESSION_ID: request.sessionId,
    OZ0_JOB_ID: request.jobId,
    OZ0_WORKING_DIR: options.workingDir,
    OZ0_STATE_DIR: stateDir,
    OZ0_PLUGIN_DIR: options.pluginDir,
  };
  const llm = request.llm;
  if (options.anthropicBaseUrl !== "") {
    env.ANTHROPIC_BASE_URL = options.anthropicBaseUrl;
    env.OZ0_ANTHROPIC_BASE_URL = options.anthropicBaseUrl;
  }
  if (options.openaiBaseUrl !== "") {
    env.OPENAI_BASE_URL = options.openaiBaseUrl;
    env.OZ0_OPENAI_BASE_URL = options.openaiBaseUrl;
  }
  if (llm !== undefined && llm.token !== "") {
    // The session token, bound to job and agent at the LLM proxy; clients
    // send it where they would send a key. It is not a provider key.
    env.OZ0_LLM_TOKEN = llm.token;
    env.ANTHROPIC_API_KEY = llm.token;
    env.OPENAI_API_KEY = llm.token;
  }
  if (llm !== undefined && Object.keys(llm.headers).length > 0) {
    const names = Object.keys(llm.headers).sort();
    env.OZ0_LLM_HEADERS = JSON.stringify(Object.fromEntries(names.map((name) => [name, llm.headers[name]])));
    // Claude Code's form: one `Name: Value` per line.
    env.ANTHROPIC_CUSTOM_HEADERS = names.map((name) => `${name}: ${llm.headers[name] ?? ""}`).join("\n");
  }
  if (request.trace !== undefined && request.trace.traceparent !== "") {
    env.TRACEPARENT = request.trace.traceparent;
    if (request.trace.tracestate !== "") env.TRACESTATE = request.trace.tracestate;
  }
  if (options.otlpTraces !== undefined) {
    // Traces only, to the relay, in the standard variables any OpenTelemetry SDK reads; metrics and logs stay off.
    Object.assign(env, {
      OTEL_SDK_DISABLED: "false",
      OTEL_TRACES_EXPORTER: "otlp",
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: options.otlpTraces.endpoint,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: options.otlpTraces.protocol,
      OTEL_METRICS_EXPORTER: "none",
      OTEL_LOGS_EXPORTER: "none",
      OTEL_RESOURCE_ATTRIBUTES: `oz0.session.id=${encodeURIComponent(request.sessionId)},oz0.job.id=${encodeURIComponent(request.jobId)}`,
    });
  }
  return env;
}
