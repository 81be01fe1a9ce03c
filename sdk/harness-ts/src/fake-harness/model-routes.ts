// The fake harness keeps one conversation in the Anthropic Messages form and
// sends it on the route the request's model names: `openai/…` models go to
// OpenAI Chat Completions at {openaiBaseUrl}/chat/completions (the
// conversation translated there and the answer back), every other model to
// {anthropicBaseUrl}/v1/messages as it is.
import type { JsonObject } from "@bufbuild/protobuf";
import { context, propagation } from "@opentelemetry/api";
import type { ModelEndpoint } from "../harness/index.js";

export interface ContentBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: JsonObject;
  tool_use_id?: string;
  content?: string;
  is_error?: boolean;
}
export interface Message {
  role: "user" | "assistant";
  content: string | ContentBlock[];
}
export interface ToolDefinition {
  name: string;
  description: string;
  input_schema: unknown;
}
export interface ModelReply {
  content: ContentBlock[];
  usage: { inputTokens: number; outputTokens: number };
}

export interface ModelCall {
  system: string;
  messages: Message[];
  tools: ToolDefinition[];
  signal: AbortSignal;
}

/** The active span's `traceparent` over the session's, when spans are exported: the proxy's span then continues the harness's `chat` span. */
function withActiveTraceContext(headers: Record<string, string>): Record<string, string> {
  propagation.inject(context.active(), headers);
  return headers;
}

/** One model call on the session's route; throws with the proxy's status and answer when it fails. */
export async function callModel(model: ModelEndpoint, call: ModelCall): Promise<ModelReply> {
  const openai = model.provider === "openai";
  const url = openai ? `${model.openaiBaseUrl}/chat/completions` : `${model.anthropicBaseUrl}/v1/messages`;
  const body = openai
    ? {
        model: model.model,
        max_tokens: 4096,
        messages: toOpenAiMessages(call.system, call.messages),
        tools: call.tools.map(toOpenAiTool),
      }
    : { model: model.model, max_tokens: 4096, system: call.system, messages: call.messages, tools: call.tools };
  const response = await fetchAcrossRestarts(url, {
    method: "POST",
    headers: withActiveTraceContext({
      ...model.headers,
      "content-type": "application/json",
      ...(openai ? {} : { "anthropic-version": "2023-06-01" }),
    }),
    body: JSON.stringify(body),
    signal: call.signal,
  });
  if (!response.ok) throw new Error(`the model call failed: HTTP ${response.status} ${refusal(await response.text())}`);
  return openai
    ? fromOpenAi((await response.json()) as OpenAiCompletion)
    : fromAnthropic((await response.json()) as AnthropicMessage);
}

/**
 * What a refused call's body says, for the session's error: the provider's (or the proxy's) error type and its
 * whole message, which ends with what to do (a budget's says where it is raised); the raw body, bounded, when it
 * is not that JSON.
 */
function refusal(body: string): string {
  try {
    const { error } = JSON.parse(body) as { error?: { type?: string; code?: string; message?: string } };
    if (typeof error?.message === "string")
      return `${error.type ?? error.code ?? "error"}: ${error.message.slice(0, MAX_REFUSAL_CHARS)}`;
  } catch {
    // Not JSON: the body as it came.
  }
  return body.slice(0, MAX_REFUSAL_CHARS);
}

/** A refusal's message is kept up to this long (a budget's is about 400 characters). */
const MAX_REFUSAL_CHARS = 2_000;

/** Waits between tries when the proxy does not answer at all: about 8 s in all, longer than a restart of the proxy takes. */
const RECONNECT_DELAYS_MS = [250, 500, 1_000, 2_000, 4_000];

/**
 * A call the proxy never answered (refused or cut: it is restarting) is sent
 * again, as the providers' SDKs do. An answer, even an error, is final: the
 * proxy has already retried the provider's 429 and 5xx.
 */
async function fetchAcrossRestarts(url: string, init: RequestInit & { signal: AbortSignal }): Promise<Response> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(url, init);
    } catch (error) {
      const delay = RECONNECT_DELAYS_MS[attempt];
      if (init.signal.aborted || delay === undefined) throw error;
      await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }
}

interface AnthropicMessage {
  content: ContentBlock[];
  usage?: { input_tokens?: number; output_tokens?: number };
}

function fromAnthropic(reply: AnthropicMessage): ModelReply {
  return {
    content: reply.content,
    usage: { inputTokens: reply.usage?.input_tokens ?? 0, outputTokens: reply.usage?.output_tokens ?? 0 },
  };
}

interface OpenAiToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
interface OpenAiCompletion {
  choices: Array<{ message: { content: string | null; tool_calls?: OpenAiToolCall[] } }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number };
}

function fromOpenAi(reply: OpenAiCompletion): ModelReply {
  const message = reply.choices[0]?.message;
  const content: ContentBlock[] = [];
  if (message?.content) content.push({ type: "text", text: message.content });
  for (const call of message?.tool_calls ?? []) {
    // The model's arguments are JSON text; what is not an object reaches the tool as an empty input.
    let input: JsonObject = {};
    try {
      const parsed: unknown = JSON.parse(call.function.arguments || "{}");
      if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) input = parsed as JsonObject;
    } catch {
      input = {};
    }
    content.push({ type: "tool_use", id: call.id, name: call.function.name, input });
  }
  return {
    content,
    usage: { inputTokens: reply.usage?.prompt_tokens ?? 0, outputTokens: reply.usage?.completion_tokens ?? 0 },
  };
}

function toOpenAiTool(tool: ToolDefinition): unknown {
  return {
    type: "function",
    function: { name: tool.name, description: tool.description, parameters: tool.input_schema },
  };
}

/** The conversation as Chat Completions messages: the system prompt first, each tool result a `tool` message. */
function toOpenAiMessages(system: string, messages: Message[]): unknown[] {
  const out: unknown[] = system ? [{ role: "system", content: system }] : [];
  for (const message of messages) {
    if (typeof message.content === "string") {
      out.push({ role: message.role, content: message.content });
    } else if (message.role === "assistant") {
      const text = message.content.flatMap((b) => (b.type === "text" && b.text ? [b.text] : [])).join("");
      const calls = message.content
        .filter((b) => b.type === "tool_use")
        .map((b) => ({
          id: b.id,
          type: "function",
          function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) },
        }));
      out.push({ role: "assistant", content: text || null, ...(calls.length > 0 ? { tool_calls: calls } : {}) });
    } else {
      for (const block of message.content) {
        if (block.type === "tool_result")
          out.push({ role: "tool", tool_call_id: block.tool_use_id, content: block.content ?? "" });
        else if (block.type === "text") out.push({ role: "user", content: block.text ?? "" });
      }
    }
  }
  return out;
}
