// Runs one harness session with the Claude Agent SDK: request in, events out,
// and the one result returned for the caller to write.
import { mkdir } from "node:fs/promises";
import { query, type SDKResultMessage } from "@anthropic-ai/claude-agent-sdk";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { parseHarnessOptions } from "./harness-options.js";
import { createPermissionGate } from "./permission-gate.js";
import { buildQueryOptions } from "./query-options.js";
import { createRuntimeToolServer, RUNTIME_TOOL_SERVER, runtimeToolName } from "./runtime-tool-server.js";
import { SdkMessageMapper } from "./sdk-message-mapper.js";
import { stateLayout } from "./session-environment.js";
import type { SessionPort, SessionResultInit } from "./session-port.js";

export interface RunClaudeSessionOptions {
  port: SessionPort;
  /** The harness process's own environment; only PATH and locale settings are passed on. */
  inheritedEnv?: NodeJS.ProcessEnv;
  /** Defaults to the Claude Code binary the SDK ships. */
  pathToClaudeCodeExecutable?: string;
}

function cancelled(): SessionResultInit {
  return { stopReason: StopReason.CANCELLED, error: "the session was cancelled" };
}

function failure(error: unknown): SessionResultInit {
  return { stopReason: StopReason.ERROR, error: error instanceof Error ? error.message : String(error) };
}

/** Runs the session to its end and returns its result (never throws). */
export async function runClaudeSession(options: RunClaudeSessionOptions): Promise<SessionResultInit> {
  const { port } = options;
  const request = port.request;
  if (port.signal.aborted) return cancelled();

  const mapper = new SdkMessageMapper({
    emit: (event) => port.emit(event),
    displayToolName: (name) => runtimeToolName(name) ?? name,
  });
  const abortController = new AbortController();
  const onAbort = (): void => abortController.abort();
  port.signal.addEventListener("abort", onAbort, { once: true });

  let result: SDKResultMessage | undefined;
  try {
    const harness = parseHarnessOptions(request.harnessOptions);
    const gate = createPermissionGate({
      port,
      tools: harness.tools,
      isRuntimeTool: (name) => runtimeToolName(name) !== undefined,
      announceToolCall: (callId, name, input) => mapper.announceToolCall(callId, name, input),
    });
    const queryOptions = buildQueryOptions({
      request,
      harness,
      inheritedEnv: options.inheritedEnv ?? process.env,
      ...(options.pathToClaudeCodeExecutable ? { pathToClaudeCodeExecutable: options.pathToClaudeCodeExecutable } : {}),
      extra: {
        abortController,
        canUseTool: gate.canUseTool,
        hooks: { PreToolUse: [{ hooks: [gate.preToolUse] }] },
        ...(request.runtimeTools.length > 0
          ? { mcpServers: { [RUNTIME_TOOL_SERVER]: createRuntimeToolServer({ port, tools: request.runtimeTools }) } }
          : {}),
        stderr: (data) => port.log(data.trimEnd()),
      },
    });
    for (const dir of Object.values(stateLayout(request.stateDir))) await mkdir(dir, { recursive: true });

    const messages = query({ prompt: request.input, options: queryOptions });
    for await (const message of messages) {
      mapper.handle(message);
      if (message.type === "result") result = message;
    }
  } catch (error) {
    if (port.signal.aborted) return cancelled();
    // The SDK throws after yielding an error result (max turns, budget): the
    // result says more than the exception.
    if (!result) return failure(error);
  } finally {
    port.signal.removeEventListener("abort", onAbort);
  }
  if (port.signal.aborted) return cancelled();
  if (!result) return { stopReason: StopReason.ERROR, error: "Claude Code ended without a result" };
  return mapper.result(result);
}
