// Runs one harness session with the Claude Agent SDK: request in, events out,
// and the one result returned for runHarness to write.
import { mkdir } from "node:fs/promises";
import { query, type SDKResultMessage } from "@anthropic-ai/claude-agent-sdk";
import { StopReason, type ResultInit } from "@oz0/harness";
import { parseHarnessOptions, SUPPORTED_TOOLS } from "./harness-options.js";
import { createPermissionGate, STRUCTURED_OUTPUT_TOOL } from "./permission-gate.js";
import { buildQueryOptions } from "./query-options.js";
import { createRuntimeToolServer, RUNTIME_TOOL_SERVER, runtimeToolNames } from "./runtime-tool-server.js";
import { SdkMessageMapper } from "./sdk-message-mapper.js";
import { SessionSpans } from "./session-spans.js";
import { stateLayout } from "./session-environment.js";
import type { ClaudeSessionHost } from "./session-port.js";
import { structuredOutputFromText } from "./structured-output.js";
import { workspaceBoundary } from "./workspace-boundary.js";

export interface RunClaudeSessionOptions {
  session: ClaudeSessionHost;
  /** The harness process's own environment; only PATH and locale settings are passed on. */
  inheritedEnv?: NodeJS.ProcessEnv;
  /** Defaults to the Claude Code binary the SDK ships. */
  pathToClaudeCodeExecutable?: string;
}

const CANCELLED: ResultInit = { stopReason: StopReason.CANCELLED, error: "the session was cancelled" };

/**
 * Runs the session to its end and returns its result. Never throws: a bad
 * request or option, a failed start and a crash of Claude Code all come back
 * as an `error` result that says what happened.
 */
export async function runClaudeSession(options: RunClaudeSessionOptions): Promise<ResultInit> {
  const { session } = options;
  const request = session.request;
  if (session.signal.aborted) return CANCELLED;

  const runtimeTools = runtimeToolNames(
    request.runtimeTools,
    new Set<string>([...SUPPORTED_TOOLS, STRUCTURED_OUTPUT_TOOL]),
  );
  const spans = new SessionSpans({ tracer: session.tracer(), conversationId: request.sessionId });
  const mapper = new SdkMessageMapper({
    events: session,
    displayToolName: (name) => runtimeTools.runtimeName(name) ?? name,
    spans,
  });
  // SIGTERM aborts the session's signal; this ends the query and the Claude Code process with it.
  const abortController = new AbortController();
  const onAbort = (): void => abortController.abort();
  session.signal.addEventListener("abort", onAbort, { once: true });

  let result: SDKResultMessage | undefined;
  try {
    const harness = parseHarnessOptions(request.harnessOptions);
    const gate = createPermissionGate({
      session,
      tools: harness.tools,
      runtimeToolName: (name) => runtimeTools.runtimeName(name),
      boundary: workspaceBoundary({
        workingDir: request.workingDir,
        readOnlyDirs: request.skills.map((s) => s.path).filter(Boolean),
      }),
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
          ? {
              mcpServers: { [RUNTIME_TOOL_SERVER]: createRuntimeToolServer({ session, tools: request.runtimeTools }) },
              toolAliases: runtimeTools.aliases,
            }
          : {}),
        stderr: (data) => session.log("debug", "claude code", { stderr: data.trimEnd() }),
      },
    });
    for (const dir of Object.values(stateLayout(request.stateDir))) await mkdir(dir, { recursive: true });

    for await (const message of query({ prompt: request.input, options: queryOptions })) {
      mapper.handle(message);
      if (message.type === "result") result = message;
    }
  } catch (error) {
    if (session.signal.aborted) return CANCELLED;
    // The SDK throws after yielding an error result (max turns, budget): the
    // result says more than the exception.
    if (!result) return { stopReason: StopReason.ERROR, error: error instanceof Error ? error.message : String(error) };
  } finally {
    session.signal.removeEventListener("abort", onAbort);
    spans.end();
  }
  if (session.signal.aborted) return CANCELLED;
  if (!result) return { stopReason: StopReason.ERROR, error: "Claude Code ended without a result" };
  const mapped = mapper.result(result);
  if (request.outputSchema && mapped.stopReason === StopReason.COMPLETED && !mapped.structuredOutput) {
    // The model answered in text rather than through StructuredOutput.
    const structured = structuredOutputFromText(mapped.text ?? "", request.outputSchema);
    return structured.ok
      ? { ...mapped, structuredOutput: structured.value }
      : { ...mapped, stopReason: StopReason.ERROR, error: structured.error };
  }
  return mapped;
}
