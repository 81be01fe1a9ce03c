// The scripted model's answers in the Anthropic Messages and OpenAI Chat
// Completions wire formats, as the official SDKs parse them.
import type { ScriptedToolCall, ScriptedTurn, ScriptedUsage } from "./scripted-model-types.js";

/** How the scripted model answers one API with a turn: the API's shapes of an error, a whole answer and a stream. */
export interface ScriptedAnswerFormat {
  error(status: number, message: string): unknown;
  whole(answer: AnswerInput): unknown;
  /** `body` is the request's, for what it asks of the stream (OpenAI's `stream_options`). */
  stream(answer: AnswerInput, body: Record<string, unknown>): StreamFrame[];
  /** What a stream cut mid-way reported before the cut. */
  cutUsage(usage: Required<ScriptedUsage>): Partial<ScriptedUsage>;
  /** How many answers of the model the request's conversation holds. */
  modelTurns(body: Record<string, unknown>): number;
}

/** A frame of a streamed answer; `cut` marks where a `cutMidStream` turn stops. */
export type StreamFrame = { data: string } | { cut: true };

export interface AnswerInput {
  turn: ScriptedTurn;
  usage: Required<ScriptedUsage>;
  model: string;
  /** Distinguishes ids across calls deterministically. */
  seq: number;
}

/** About four characters a token, at least one: deterministic and good enough for metering tests. */
export function estimateTokens(value: unknown): number {
  if (value === undefined || value === null) return 0;
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return Math.max(1, Math.ceil(text.length / 4));
}

export function toolCallId(call: ScriptedToolCall, prefix: string, seq: number, index: number): string {
  return call.id ?? `${prefix}_scripted_${seq}_${index}`;
}

export function anthropicStopReason(turn: ScriptedTurn): string {
  return turn.stopReason ?? (turn.toolCalls?.length ? "tool_use" : "end_turn");
}

function openAiFinishReason(turn: ScriptedTurn): string {
  const reason = anthropicStopReason(turn);
  switch (reason) {
    case "tool_use":
      return "tool_calls";
    case "max_tokens":
      return "length";
    case "end_turn":
    case "stop_sequence":
      return "stop";
    default:
      return reason;
  }
}

function anthropicUsage(usage: Required<ScriptedUsage>): Record<string, number> {
  return {
    input_tokens: usage.input,
    cache_creation_input_tokens: usage.cacheWrite,
    cache_read_input_tokens: usage.cacheRead,
    output_tokens: usage.output,
  };
}

export function anthropicMessage({ turn, usage, model, seq }: AnswerInput): unknown {
  const content: unknown[] = [];
  if (turn.text !== undefined && turn.text !== "") content.push({ type: "text", text: turn.text });
  (turn.toolCalls ?? []).forEach((call, i) =>
    content.push({ type: "tool_use", id: toolCallId(call, "toolu", seq, i), name: call.name, input: call.input ?? {} }),
  );
  return {
    id: `msg_scripted_${seq}`,
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: anthropicStopReason(turn),
    stop_sequence: null,
    usage: anthropicUsage(usage),
  };
}

/** Splits text into a few deltas so clients see a real stream. */
export function chunks(text: string, size = 16): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

/** Pushes the cut marker the first time it is called, when the turn asks to be cut. */
export function cutOnce(turn: ScriptedTurn, frames: StreamFrame[]): () => void {
  let done = false;
  return () => {
    if (turn.cutMidStream && !done) {
      frames.push({ cut: true });
      done = true;
    }
  };
}

export function sse(event: string, data: unknown): StreamFrame {
  return { data: `event: ${event}\ndata: ${JSON.stringify(data)}\n\n` };
}

/**
 * The Anthropic event sequence: message_start carries input and cache usage
 * (output 1, as the real API does), message_delta the final output count.
 */
export function anthropicStream({ turn, usage, model, seq }: AnswerInput): StreamFrame[] {
  const frames: StreamFrame[] = [];
  const startUsage = { ...anthropicUsage(usage), output_tokens: Math.min(1, usage.output) };
  frames.push(
    sse("message_start", {
      type: "message_start",
      message: {
        id: `msg_scripted_${seq}`,
        type: "message",
        role: "assistant",
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: startUsage,
      },
    }),
  );
  let index = 0;
  const cutHere = cutOnce(turn, frames);
  if (turn.text !== undefined && turn.text !== "") {
    frames.push(
      sse("content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } }),
    );
    frames.push(sse("ping", { type: "ping" }));
    const parts = chunks(turn.text);
    parts.forEach((part, i) => {
      if (i === Math.ceil(parts.length / 2)) cutHere();
      frames.push(
        sse("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: part } }),
      );
    });
    if (parts.length === 1) cutHere();
    frames.push(sse("content_block_stop", { type: "content_block_stop", index }));
    index += 1;
  }
  (turn.toolCalls ?? []).forEach((call, i) => {
    frames.push(
      sse("content_block_start", {
        type: "content_block_start",
        index,
        content_block: { type: "tool_use", id: toolCallId(call, "toolu", seq, i), name: call.name, input: {} },
      }),
    );
    for (const part of chunks(JSON.stringify(call.input ?? {}))) {
      frames.push(
        sse("content_block_delta", {
          type: "content_block_delta",
          index,
          delta: { type: "input_json_delta", partial_json: part },
        }),
      );
    }
    cutHere();
    frames.push(sse("content_block_stop", { type: "content_block_stop", index }));
    index += 1;
  });
  cutHere();
  frames.push(
    sse("message_delta", {
      type: "message_delta",
      delta: { stop_reason: anthropicStopReason(turn), stop_sequence: null },
      usage: { output_tokens: usage.output },
    }),
  );
  frames.push(sse("message_stop", { type: "message_stop" }));
  return frames;
}

export function anthropicError(status: number, message: string): unknown {
  const type =
    status === 529
      ? "overloaded_error"
      : status === 429
        ? "rate_limit_error"
        : status === 401
          ? "authentication_error"
          : status === 403
            ? "permission_error"
            : status === 404
              ? "not_found_error"
              : status >= 500
                ? "api_error"
                : "invalid_request_error";
  return { type: "error", error: { type, message } };
}

export function openAiError(status: number, message: string): unknown {
  const type = status === 429 ? "rate_limit_exceeded" : status >= 500 ? "server_error" : "invalid_request_error";
  return { error: { message, type, param: null, code: null } };
}

function openAiUsage(usage: Required<ScriptedUsage>): unknown {
  // OpenAI counts cached tokens inside prompt_tokens.
  const prompt = usage.input + usage.cacheRead + usage.cacheWrite;
  return {
    prompt_tokens: prompt,
    completion_tokens: usage.output,
    total_tokens: prompt + usage.output,
    prompt_tokens_details: { cached_tokens: usage.cacheRead, audio_tokens: 0 },
    completion_tokens_details: {
      reasoning_tokens: usage.reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

export function openAiCompletion({ turn, usage, model, seq }: AnswerInput): unknown {
  const toolCalls = (turn.toolCalls ?? []).map((call, i) => ({
    id: toolCallId(call, "call", seq, i),
    type: "function",
    function: { name: call.name, arguments: JSON.stringify(call.input ?? {}) },
  }));
  return {
    id: `chatcmpl-scripted-${seq}`,
    object: "chat.completion",
    created: 1_700_000_000 + seq,
    model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: turn.text ?? null,
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        logprobs: null,
        finish_reason: openAiFinishReason(turn),
      },
    ],
    usage: openAiUsage(usage),
    system_fingerprint: "fp_scripted",
  };
}

/**
 * Chat completion chunks; the usage chunk only when the client asked
 * (`stream_options.include_usage`). Each chunk with choices carries an
 * `obfuscation` member of random letters after `usage`, as OpenAI writes it,
 * only when the client asked for it by name (`include_obfuscation: true`):
 * OpenAI sends it unless told not to, but the suite's streams predate it.
 */
export function openAiStream(
  { turn, usage, model, seq }: AnswerInput,
  { includeUsage, obfuscation }: { includeUsage: boolean; obfuscation: boolean },
): StreamFrame[] {
  const base = {
    id: `chatcmpl-scripted-${seq}`,
    object: "chat.completion.chunk",
    created: 1_700_000_000 + seq,
    model,
    system_fingerprint: "fp_scripted",
  };
  let padded = 0;
  const chunk = (delta: unknown, finishReason: string | null = null): StreamFrame => ({
    data: `data: ${JSON.stringify({
      ...base,
      choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
      ...(includeUsage ? { usage: null } : {}),
      // Letters of a length that varies from chunk to chunk, as OpenAI's padding does.
      ...(obfuscation ? { obfuscation: OBFUSCATION.slice(0, 3 + ((padded++ * 7) % 12)) } : {}),
    })}\n\n`,
  });
  const frames: StreamFrame[] = [chunk({ role: "assistant", content: "", refusal: null })];
  const cutHere = cutOnce(turn, frames);
  if (turn.text !== undefined && turn.text !== "") {
    const parts = chunks(turn.text);
    parts.forEach((part, i) => {
      if (i === Math.ceil(parts.length / 2)) cutHere();
      frames.push(chunk({ content: part }));
    });
  }
  (turn.toolCalls ?? []).forEach((call, i) => {
    frames.push(
      chunk({
        tool_calls: [
          {
            index: i,
            id: toolCallId(call, "call", seq, i),
            type: "function",
            function: { name: call.name, arguments: "" },
          },
        ],
      }),
    );
    for (const part of chunks(JSON.stringify(call.input ?? {}))) {
      frames.push(chunk({ tool_calls: [{ index: i, function: { arguments: part } }] }));
    }
  });
  cutHere();
  frames.push(chunk({}, openAiFinishReason(turn)));
  if (includeUsage)
    frames.push({ data: `data: ${JSON.stringify({ ...base, choices: [], usage: openAiUsage(usage) })}\n\n` });
  frames.push({ data: "data: [DONE]\n\n" });
  return frames;
}

/** Answers of the model in a list of messages (`role: "assistant"`), as both Messages and Chat Completions write conversations. */
function assistantMessages(body: Record<string, unknown>): number {
  const messages = body.messages;
  if (!Array.isArray(messages)) return 0;
  return messages.filter((m) => (m as { role?: unknown } | null)?.role === "assistant").length;
}

export const ANTHROPIC_MESSAGES: ScriptedAnswerFormat = {
  error: anthropicError,
  whole: anthropicMessage,
  stream: (answer) => anthropicStream(answer),
  // message_start came: input, cache and one output token.
  cutUsage: (usage) => ({ ...usage, output: Math.min(1, usage.output), reasoning: 0 }),
  modelTurns: assistantMessages,
};

const OBFUSCATION = "qZ3mK8wTn1xVbR4s";

export const OPENAI_CHAT_COMPLETIONS: ScriptedAnswerFormat = {
  error: openAiError,
  whole: openAiCompletion,
  stream: (answer, body) => {
    const options = body.stream_options as { include_usage?: unknown; include_obfuscation?: unknown } | undefined;
    return openAiStream(answer, {
      includeUsage: options?.include_usage === true,
      obfuscation: options?.include_obfuscation === true,
    });
  },
  // Usage comes in the last chunk only.
  cutUsage: () => ({}),
  modelTurns: assistantMessages,
};
