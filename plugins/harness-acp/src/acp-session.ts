// One harness session run by an ACP agent: start the agent, `initialize`,
// `session/new` in the working directory, one `session/prompt` with the
// instructions and input, and its stop reason as the session's result.
import { mkdir } from "node:fs/promises";
import { client, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";
import type { ClientConnection, ContentBlock } from "@agentclientprotocol/sdk";
import { proxyRefusal, StopReason } from "@oz0/harness";
import type { HarnessSession, ResultInit } from "@oz0/harness";
import { AcpSessionError } from "./acp-errors.js";
import { buildAgentEnvironment, agentStateLayout } from "./agent-environment.js";
import { presetLaunch } from "./agent-presets.js";
import type { AgentLaunch } from "./agent-presets.js";
import { startAgentProcess } from "./agent-process.js";
import type { AgentProcess } from "./agent-process.js";
import { parseHarnessOptions } from "./harness-options.js";
import type { AgentSpec } from "./harness-options.js";
import { answerPermissionRequest } from "./permission-bridge.js";
import { SessionUpdateMapper } from "./session-update-mapper.js";

/** How long a cancelled agent has to answer its prompt with `cancelled` (inside the runtime's 10 s grace). */
export const DEFAULT_CANCEL_GRACE_MS = 5_000;
/** How long an agent has to exit after SIGTERM to its group before SIGKILL. */
const STOP_GRACE_MS = 2_000;

export interface AcpSessionOptions {
  session: HarnessSession;
  /** The harness's version, sent as clientInfo. */
  version: string;
  /** The agent when the options name none (main.js's `--agent` or `--agent-command`). */
  defaultAgent?: AgentSpec;
  /** The harness's own environment; read for PATH and locale only. */
  inheritedEnv: NodeJS.ProcessEnv;
  cancelGraceMs?: number;
}

/** Maps an ACP stop reason onto the protocol's closed set. */
export function resultForStopReason(stopReason: string, text: string): ResultInit {
  switch (stopReason) {
    case "end_turn":
      return { stopReason: StopReason.COMPLETED, text };
    case "max_turn_requests":
      return { stopReason: StopReason.MAX_TURNS, text, error: "the agent reached its turn limit (max_turn_requests)" };
    case "refusal":
      return { stopReason: StopReason.REFUSED, text, error: "the agent refused to continue (refusal)" };
    case "cancelled":
      return { stopReason: StopReason.CANCELLED, text, error: "the agent cancelled the prompt turn" };
    case "max_tokens":
      // The answer was cut off mid-way: the work is not done, so the job must not read as a success.
      return {
        stopReason: StopReason.ERROR,
        text,
        error: "the model's answer was cut off at its output token limit (max_tokens); the turn did not finish",
      };
    default:
      return {
        stopReason: StopReason.ERROR,
        text,
        error: `the agent stopped with an unknown stop reason ${JSON.stringify(stopReason)}`,
      };
  }
}

/** The mode that asks before every tool call, in the agents that name their modes (Claude Code, Gemini CLI). */
const ASKING_MODE = "default";
/**
 * Modes of known agents that run tool calls without asking: Claude Code's,
 * Gemini CLI's and Qwen Code's (`auto-edit`), codex-acp's (`auto` runs
 * commands and edits in the working directory unasked, and is its default),
 * goose's `auto`.
 */
const NON_ASKING_MODES = new Set([
  "bypassPermissions",
  "acceptEdits",
  "dontAsk",
  "yolo",
  "autoEdit",
  "auto_edit",
  "auto-edit",
  "auto",
  "full-access",
  "agent-full-access",
]);

/**
 * The mode the session must run in, given what `session/new` reported: the
 * agent's `default` mode when it offers one, else the mode it is in unless
 * that is known to skip asking (then undefined: the session cannot run).
 */
export function askingMode(modes: unknown): { mode: string | undefined; current: string | undefined } {
  if (typeof modes !== "object" || modes === null) return { mode: undefined, current: undefined };
  const { currentModeId, availableModes } = modes as { currentModeId?: unknown; availableModes?: unknown };
  const current = typeof currentModeId === "string" ? currentModeId : undefined;
  const offered = Array.isArray(availableModes)
    ? availableModes.flatMap((m: unknown) =>
        typeof m === "object" && m !== null && typeof (m as { id?: unknown }).id === "string"
          ? [(m as { id: string }).id]
          : [],
      )
    : [];
  if (offered.includes(ASKING_MODE)) return { mode: ASKING_MODE, current };
  return { mode: current !== undefined && !NON_ASKING_MODES.has(current) ? current : undefined, current };
}

/** The current value of a session config option that is the mode (category or id `mode`), if any. */
function modeOption(configOptions: unknown): string | undefined {
  if (!Array.isArray(configOptions)) return undefined;
  for (const option of configOptions as unknown[]) {
    if (typeof option !== "object" || option === null) continue;
    const { id, category, currentValue } = option as { id?: unknown; category?: unknown; currentValue?: unknown };
    if ((category === "mode" || id === "mode") && typeof currentValue === "string") return currentValue;
  }
  return undefined;
}

/** A session in progress; `cancel()` is what SIGTERM calls. */
export class AcpSessionRun {
  readonly #options: AcpSessionOptions;
  readonly #session: HarnessSession;
  readonly #cancel = new AbortController();
  #failure: AcpSessionError | undefined;
  #onFailure: ((error: AcpSessionError) => void) | undefined;
  #agent: AgentProcess | undefined;
  #connection: ClientConnection | undefined;
  #acpSessionId: string | undefined;
  #cancelReason = "";

  constructor(options: AcpSessionOptions) {
    this.#options = options;
    this.#session = options.session;
  }

  /**
   * Cancels as the protocol asks: `session/cancel` to the agent, pending
   * permission requests answered `cancelled`, then the agent's `cancelled`
   * stop is awaited for the grace before its process group is ended.
   */
  cancel(reason = "the session was cancelled"): void {
    if (this.#cancel.signal.aborted) return;
    this.#cancelReason = reason;
    this.#cancel.abort();
    const sessionId = this.#acpSessionId;
    if (this.#connection !== undefined && sessionId !== undefined) {
      this.#connection.agent.notify("session/cancel", { sessionId }).catch(() => {});
    }
    const timer = setTimeout(
      () =>
        this.#fail(
          new AcpSessionError("agent_exited", "the agent did not end its prompt turn within the cancel grace"),
        ),
      this.#options.cancelGraceMs ?? DEFAULT_CANCEL_GRACE_MS,
    );
    timer.unref();
  }

  /** Runs the session to its result (returned, for runHarness to write). */
  async run(): Promise<ResultInit> {
    const session = this.#session;
    const cancelled = (): ResultInit => ({
      stopReason: StopReason.CANCELLED,
      error: this.#cancelReason || "the session was cancelled",
    });
    if (this.#cancel.signal.aborted) return cancelled();
    let launch: AgentLaunch;
    try {
      launch = this.#launch();
    } catch (error) {
      return { stopReason: StopReason.ERROR, error: (error as Error).message };
    }
    const failed = new Promise<never>((_resolve, reject) => {
      this.#onFailure = reject;
      if (this.#failure !== undefined) reject(this.#failure);
    });
    failed.catch(() => {});
    const mapper = new SessionUpdateMapper({ sink: session, model: session.model.model });
    try {
      const result = await Promise.race([this.#converse(launch, mapper, failed), failed]);
      return this.#cancel.signal.aborted ? cancelled() : result;
    } catch (error) {
      if (this.#cancel.signal.aborted) return cancelled();
      const code = error instanceof AcpSessionError ? error.code : "request_failed";
      session.log("error", "the ACP session failed", { code, error: (error as Error).message });
      return { stopReason: StopReason.ERROR, text: mapper.finalText, error: (error as Error).message };
    } finally {
      this.#connection?.close();
      await this.#agent?.stop(STOP_GRACE_MS);
    }
  }

  #fail(error: AcpSessionError): void {
    if (this.#failure !== undefined) return;
    this.#failure = error;
    this.#onFailure?.(error);
  }

  #launch(): AgentLaunch {
    const request = this.#session.request;
    const options = parseHarnessOptions(request.harnessOptions, this.#options.defaultAgent);
    if (request.workingDir === "") throw new Error("the request has no working_dir; an ACP session runs in one");
    if (request.stateDir === "") throw new Error("the request has no state_dir; the agent's HOME lives there");
    const agent = options.agent;
    const launch: AgentLaunch =
      agent.kind === "preset"
        ? presetLaunch(agent.preset, {
            stateDir: request.stateDir,
            workingDir: request.workingDir,
            instructions: request.instructions,
            maxTurns: request.limits?.maxTurns ?? 0,
            model: this.#session.model.model,
            tools: options.tools,
          })
        : { command: agent.command, env: agent.env, modelEnv: agent.modelEnv, instructionsInPrompt: true };
    const endpoint = this.#session.model;
    if (launch.modelEnv === "anthropic" && endpoint.anthropicBaseUrl === "")
      throw new Error(
        "the request has no llm.anthropic_base_url; this agent calls an Anthropic Messages endpoint (the LLM proxy)",
      );
    if (launch.modelEnv === "openai" && endpoint.openaiBaseUrl === "")
      throw new Error("the request has no llm.openai_base_url; this agent calls an OpenAI endpoint (the LLM proxy)");
    if (launch.modelEnv !== "none" && endpoint.apiKey === "")
      throw new Error("the request has no llm.token; model calls need the session token");
    return launch;
  }

  /** `failed` rejects with the first misbehaviour, which wins over the request error it causes. */
  async #converse(launch: AgentLaunch, mapper: SessionUpdateMapper, failed: Promise<never>): Promise<ResultInit> {
    const session = this.#session;
    const request = session.request;
    const { home, tmp } = agentStateLayout(request.stateDir);
    await Promise.all([mkdir(home, { recursive: true }), mkdir(tmp, { recursive: true })]);
    const env = buildAgentEnvironment({
      stateDir: request.stateDir,
      endpoint: session.model,
      modelEnv: launch.modelEnv,
      extra: launch.env,
      inherited: this.#options.inheritedEnv,
    });
    const agent = startAgentProcess({
      command: launch.command,
      cwd: request.workingDir,
      env,
      onFailure: (error) => this.#fail(error),
      onStderr: (chunk) => process.stderr.write(chunk),
      onSessionUpdate: (params) => {
        // Once the session failed, nothing more the agent reports reaches the runtime.
        if (this.#failure !== undefined) return;
        try {
          mapper.apply(params);
        } catch (error) {
          this.#fail(
            error instanceof AcpSessionError ? error : new AcpSessionError("invalid_message", (error as Error).message),
          );
        }
      },
    });
    this.#agent = agent;

    // session/update never reaches the SDK (agent-process.ts takes it in stdout
    // order); a permission request read before its call's tool_call waits for it
    // (session-update-mapper.ts, ANNOUNCEMENT_GRACE_MS).
    const app = client({ name: "oz0-harness-acp" }).onRequest(
      "session/request_permission",
      (params: unknown) => params,
      async ({ params }) => {
        try {
          return await answerPermissionRequest(params, {
            session,
            mapper,
            cancelSignal: this.#cancel.signal,
            workingDir: request.workingDir,
            homeDir: home,
            onSessionCancelled: (reason) => this.cancel(reason),
          });
        } catch (error) {
          if (error instanceof AcpSessionError) this.#fail(error);
          return { outcome: { outcome: "cancelled" } };
        }
      },
    );
    const connection = app.connect(agent.stream);
    this.#connection = connection;
    const call = async <T>(what: string, send: () => Promise<T>): Promise<T> => {
      try {
        return await send();
      } catch (error) {
        // A request the dying agent could not answer: report how it died instead.
        if (agent.gone) await failed;
        throw new AcpSessionError(
          "request_failed",
          `the ACP agent answered ${what} with an error: ${(error as Error).message}`,
        );
      }
    };

    const init = await call("initialize", () =>
      connection.agent.request("initialize", {
        protocolVersion: PROTOCOL_VERSION,
        // No fs or terminal: the agent works in the working directory with its own tools.
        clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
        clientInfo: { name: "oz0-harness-acp", version: this.#options.version },
      }),
    );
    if (init.protocolVersion !== PROTOCOL_VERSION) {
      throw new AcpSessionError(
        "unsupported_protocol_version",
        `the ACP agent speaks protocol version ${String(init.protocolVersion)}; this harness speaks version ${PROTOCOL_VERSION}`,
      );
    }
    session.log("info", "ACP agent initialized", {
      agent: init.agentInfo?.name ?? "",
      version: init.agentInfo?.version ?? "",
    });

    const maxTurns = request.limits?.maxTurns ?? 0;
    const created = await call("session/new", () =>
      connection.agent.request("session/new", {
        cwd: request.workingDir,
        mcpServers: [],
        // `_meta.oz0.maxTurns`: the session's turn limit, for agents that read it (ACP has no field for it).
        _meta: { ...(maxTurns > 0 ? { oz0: { maxTurns } } : {}), ...launch.sessionMeta },
      }),
    );
    this.#acpSessionId = created.sessionId;
    if (this.#cancel.signal.aborted) {
      // SIGTERM came while the session was being set up.
      connection.agent.notify("session/cancel", { sessionId: created.sessionId }).catch(() => {});
    }
    await this.#settleMode(created, mapper, call);

    const prompt: ContentBlock[] = [];
    if (launch.instructionsInPrompt && request.instructions.trim() !== "")
      prompt.push({ type: "text", text: request.instructions });
    prompt.push({ type: "text", text: launch.inertInput ? launch.inertInput(request.input) : request.input });
    const turn = await call("session/prompt", () =>
      connection.agent.request("session/prompt", { sessionId: created.sessionId, prompt }),
    ).then(
      (response) => ({ response }),
      (error: unknown) => {
        // The agent's model call was refused by the LLM proxy at a limit the agent set: the session reached it.
        const refused =
          error instanceof AcpSessionError && error.code === "request_failed" ? proxyRefusal(error.message) : undefined;
        if (refused === undefined) throw error;
        return { refused };
      },
    );
    if ("refused" in turn) {
      session.log("info", "the prompt turn ended: the LLM proxy refused a model call", {
        error: turn.refused.error ?? "",
      });
      return { ...turn.refused, text: mapper.finalText };
    }
    const { response } = turn;
    session.log("info", "the prompt turn ended", {
      stopReason: response.stopReason,
      cancelled: this.#cancel.signal.aborted,
    });
    mapper.promptUsage((response as { usage?: unknown }).usage);
    return resultForStopReason(response.stopReason, mapper.finalText);
  }

  /**
   * Puts the session in the agent's mode that asks before every tool call
   * (`session/set_mode` when it reports another one), or fails it; from here
   * on a switch to another mode fails the session (session-update-mapper.ts).
   */
  async #settleMode(
    created: { sessionId: string; modes?: unknown; configOptions?: unknown },
    mapper: SessionUpdateMapper,
    call: <T>(what: string, send: () => Promise<T>) => Promise<T>,
  ): Promise<void> {
    // An agent may report its mode only as a session config option (ACP's `configOptions`, category
    // or id `mode`): held to as it is, and refused when it is one known to run calls without asking.
    const configMode = modeOption(created.configOptions);
    if (created.modes === undefined && configMode !== undefined) {
      const current = mapper.reportedMode ?? configMode;
      if (NON_ASKING_MODES.has(current))
        throw new AcpSessionError(
          "permission_mode",
          `the agent started the session in mode ${JSON.stringify(current)}, which runs tool calls without asking; this harness runs agents only in a mode that asks before every tool call: make the agent start in one`,
        );
      mapper.settleMode(current);
      return;
    }
    const modes = created.modes ?? undefined;
    const { mode, current: reported } = askingMode(modes);
    const current = mapper.reportedMode ?? reported;
    if (modes === undefined && mapper.reportedMode === undefined) {
      mapper.settleMode(undefined);
      return;
    }
    if (mode === undefined)
      throw new AcpSessionError(
        "permission_mode",
        `the agent started the session in mode ${JSON.stringify(current)}, which runs tool calls without asking, and offers no "${ASKING_MODE}" mode to switch to; this harness runs agents only in a mode that asks before every tool call`,
      );
    // Settled first: the agent may report the switch before it answers.
    mapper.settleMode(mode);
    if (current === mode) return;
    this.#session.log("warn", "the agent started the session in another mode; switching it back", {
      mode: current ?? "",
      to: mode,
    });
    await call("session/set_mode", () =>
      this.#connection!.agent.request("session/set_mode", { sessionId: created.sessionId, modeId: mode }),
    );
  }
}
