// oz0-fake-harness: a real, minimal agent loop on @oz0/harness. It calls the
// model on the route the request's model names (Anthropic Messages, or OpenAI
// Chat Completions for `openai/…` models), offers the working-directory tools
// and the runtime's tools, asks before every call, and returns the model's
// final text (or its JSON as structured output).
import { realpath } from "node:fs/promises";
import type { JsonObject } from "@bufbuild/protobuf";
import { SpanKind, SpanStatusCode, type Span } from "@opentelemetry/api";
import { runHarness, StopReason } from "../harness/index.js";
import type { HarnessSession } from "../harness/index.js";
import { callModel } from "./model-routes.js";
import type { ContentBlock, Message, ToolDefinition } from "./model-routes.js";
import { runWorkingDirTool, WORKING_DIR_TOOLS } from "./working-dir-tools.js";

async function runTool(
  session: HarnessSession,
  root: string,
  call: ContentBlock,
): Promise<{ content: string; isError: boolean }> {
  const name = call.name ?? "";
  session.toolCall({ callId: call.id ?? "", tool: name, input: call.input ?? {} });
  const decision = await session.requestPermission({
    tool: name,
    input: call.input ?? {},
    callId: call.id ?? "",
    title: `${name} ${JSON.stringify(call.input)}`,
  });
  if (!decision.allow) return { content: `Permission denied: ${decision.reason || "no reason given"}`, isError: true };
  try {
    if (session.request.runtimeTools.some((tool) => tool.name === name)) {
      const result = await session.callRuntimeTool(name, decision.input);
      return result.isError
        ? { content: result.error, isError: true }
        : { content: JSON.stringify(result.output), isError: false };
    }
    return { content: await runWorkingDirTool(root, name, decision.input, session.signal), isError: false };
  } catch (error) {
    return { content: (error as Error).message, isError: true };
  }
}

/**
 * Runs `work` in a span of the session's trace (exported when the stack
 * records traces): the harness's own share of the job's trace. Spans carry
 * names and counts, never content.
 */
async function traced<T>(
  session: HarnessSession,
  name: string,
  options: { kind?: SpanKind; attributes: Record<string, string | number> },
  work: (span: Span) => Promise<T>,
): Promise<T> {
  return session.tracer().startActiveSpan(name, options, async (span) => {
    try {
      return await work(span);
    } catch (error) {
      span.setStatus({ code: SpanStatusCode.ERROR, message: (error as Error).name });
      throw error;
    } finally {
      span.end();
    }
  });
}

function chatAttributes(session: HarnessSession): Record<string, string> {
  const { provider, model } = session.model;
  return {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": provider,
    "gen_ai.request.model": model,
    "gen_ai.conversation.id": session.request.sessionId,
  };
}

await runHarness(
  {
    name: "oz0-fake-harness",
    version: "0.1.0",
    capabilities: { permissions: true, runtimeTools: true, structuredOutput: true },
  },
  async (session) => {
    const { request } = session;
    const root = await realpath(request.workingDir || process.cwd());
    const tools: ToolDefinition[] = [
      ...WORKING_DIR_TOOLS,
      ...request.runtimeTools.map((t) => ({
        name: t.name,
        description: t.description,
        input_schema: t.inputSchema ?? { type: "object" },
      })),
    ];
    const schema = request.outputSchema
      ? `\nEnd with only a JSON object valid against this JSON Schema: ${JSON.stringify(request.outputSchema)}`
      : "";
    const messages: Message[] = [{ role: "user", content: request.input }];
    const maxTurns = request.limits?.maxTurns || 25;
    while (session.turns < maxTurns) {
      session.turns++;
      const reply = await traced(
        session,
        `chat ${session.model.model}`,
        { kind: SpanKind.CLIENT, attributes: chatAttributes(session) },
        async (span) => {
          const answer = await callModel(session.model, {
            system: request.instructions + schema,
            messages,
            tools,
            signal: session.signal,
          });
          span.setAttributes({
            "gen_ai.usage.input_tokens": answer.usage.inputTokens,
            "gen_ai.usage.output_tokens": answer.usage.outputTokens,
          });
          return answer;
        },
      );
      session.usage({ model: session.model.model, ...reply.usage });
      messages.push({ role: "assistant", content: reply.content });
      const text = reply.content.flatMap((block) => (block.type === "text" && block.text ? [block.text] : [])).join("");
      if (text !== "") session.text(text);
      const calls = reply.content.filter((block) => block.type === "tool_use");
      if (calls.length === 0) {
        if (!request.outputSchema) return text;
        try {
          return { text, structuredOutput: JSON.parse(text) as JsonObject };
        } catch {
          return {
            stopReason: StopReason.ERROR,
            text,
            error: "the model's final answer is not the JSON the output schema asks for",
          };
        }
      }
      // The runtime's tools of one turn run together (a turn asking for two
      // harness operations gets them concurrently, as real harnesses batch
      // them); working-directory tools keep their order, one after another.
      const isRuntime = (call: ContentBlock): boolean => request.runtimeTools.some((tool) => tool.name === call.name);
      const run = async (call: ContentBlock): Promise<ContentBlock> => {
        const toolAttributes = {
          "gen_ai.operation.name": "execute_tool",
          "gen_ai.tool.name": call.name ?? "",
          "gen_ai.tool.call.id": call.id ?? "",
        };
        const { content, isError } = await traced(
          session,
          `execute_tool ${call.name ?? ""}`,
          { attributes: toolAttributes },
          async (span) => {
            const outcome = await runTool(session, root, call);
            // A failed tool is an error span; its message stays out (it is content).
            if (outcome.isError) span.setStatus({ code: SpanStatusCode.ERROR, message: "the tool failed" });
            return outcome;
          },
        );
        session.toolResult({ callId: call.id ?? "", output: content, isError });
        return { type: "tool_result", tool_use_id: call.id ?? "", content, is_error: isError };
      };
      const runtime = new Map(calls.filter(isRuntime).map((call) => [call, run(call)] as const));
      const results: ContentBlock[] = [];
      for (const call of calls) results.push(await (runtime.get(call) ?? run(call)));
      messages.push({ role: "user", content: results });
    }
    return { stopReason: StopReason.MAX_TURNS, error: `stopped after ${maxTurns} turns` };
  },
);
