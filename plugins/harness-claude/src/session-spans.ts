// The harness's share of the job's trace, from the Claude Agent SDK's
// messages: a `chat {model}` span per model call and an `execute_tool {tool}`
// span per tool call, below the session's span (the tracer of @oz0/harness
// parents them there and exports them when the stack records traces). Claude
// Code makes the model calls itself, so the proxy's spans cannot be children
// of these: they are their siblings, under the same session span. Names,
// models, ids and token counts only; never prompts, text or tool input.
import { SpanKind, SpanStatusCode, type Span, type Tracer } from "@opentelemetry/api";

export interface ModelCallUsage {
  model: string;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

export class SessionSpans {
  readonly #tracer: Tracer;
  readonly #conversationId: string;
  /** When the model was last handed the turn: the session's start, or the end of the last call or tool. */
  #turnStart = Date.now();
  #chat: Span | undefined;
  readonly #tools = new Map<string, Span>();

  constructor(options: { tracer: Tracer; conversationId: string }) {
    this.#tracer = options.tracer;
    this.#conversationId = options.conversationId;
  }

  /** The first streamed event of a model call: its span starts when the turn went to the model. */
  modelCallStarted(model: string): void {
    this.#chat?.end();
    this.#chat = this.#tracer.startSpan(`chat ${model}`, {
      kind: SpanKind.CLIENT,
      startTime: this.#turnStart,
      attributes: {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": model,
        "gen_ai.conversation.id": this.#conversationId,
      },
    });
  }

  modelCallEnded(usage: ModelCallUsage): void {
    const span = this.#chat;
    this.#chat = undefined;
    this.#turnStart = Date.now();
    if (span === undefined) return;
    span.setAttributes({
      "gen_ai.response.model": usage.model,
      "gen_ai.usage.input_tokens": usage.inputTokens,
      "gen_ai.usage.output_tokens": usage.outputTokens,
      "gen_ai.usage.cache_read.input_tokens": usage.cacheReadTokens,
      "gen_ai.usage.cache_creation.input_tokens": usage.cacheWriteTokens,
    });
    span.end();
  }

  /** A tool call announced (before its permission is asked): its span covers the wait and the run. */
  toolStarted(callId: string, tool: string): void {
    if (this.#tools.has(callId)) return;
    this.#tools.set(
      callId,
      this.#tracer.startSpan(`execute_tool ${tool}`, {
        attributes: {
          "gen_ai.operation.name": "execute_tool",
          "gen_ai.tool.name": tool,
          "gen_ai.tool.call.id": callId,
        },
      }),
    );
  }

  toolEnded(callId: string, isError: boolean): void {
    const span = this.#tools.get(callId);
    if (span === undefined) return;
    this.#tools.delete(callId);
    // Refused calls end here too: an error result, whose text (content) stays off the span.
    if (isError) span.setStatus({ code: SpanStatusCode.ERROR, message: "the tool call failed or was refused" });
    span.end();
    this.#turnStart = Date.now();
  }

  /** Ends what is still open (a cancelled session, a crash of Claude Code). */
  end(): void {
    this.#chat?.end();
    this.#chat = undefined;
    for (const span of this.#tools.values()) span.end();
    this.#tools.clear();
  }
}
