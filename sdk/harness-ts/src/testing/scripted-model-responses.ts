// The scripted model's answers in the OpenAI Responses API
// (`POST /v1/responses`), as OpenAI's SDKs read them: a response object with
// its output items (a message with its output text, a function call per tool
// call) and usage, and the stream of typed events that builds it, from
// `response.created` to `response.completed`.
import type { ScriptedUsage } from "./scripted-model-types.js";
import {
  anthropicStopReason,
  chunks,
  cutOnce,
  openAiError,
  sse,
  toolCallId,
  type AnswerInput,
  type ScriptedAnswerFormat,
  type StreamFrame,
} from "./scripted-model-wire.js";

type Json = Record<string, unknown>;

function responsesUsage(usage: Required<ScriptedUsage>): Json {
  // As OpenAI counts: cached tokens inside input_tokens, reasoning inside output_tokens.
  const input = usage.input + usage.cacheRead + usage.cacheWrite;
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: usage.cacheRead },
    output_tokens: usage.output,
    output_tokens_details: { reasoning_tokens: usage.reasoning },
    total_tokens: input + usage.output,
  };
}

/** A turn that stopped at its output limit is `incomplete`; every other is `completed`. */
function statusOf(answer: AnswerInput): "completed" | "incomplete" {
  return anthropicStopReason(answer.turn) === "max_tokens" ? "incomplete" : "completed";
}

function response(answer: AnswerInput, status: string, output: Json[], usage: Json | null): Json {
  return {
    id: `resp_scripted_${answer.seq}`,
    object: "response",
    created_at: 1_700_000_000 + answer.seq,
    status,
    error: null,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: null,
    max_output_tokens: null,
    model: answer.model,
    output,
    parallel_tool_calls: true,
    previous_response_id: null,
    reasoning: { effort: null, summary: null },
    store: false,
    temperature: 1,
    text: { format: { type: "text" } },
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    usage,
    metadata: {},
  };
}

const messageId = (answer: AnswerInput): string => `msg_scripted_${answer.seq}`;
const functionCallId = (answer: AnswerInput, index: number): string => `fc_scripted_${answer.seq}_${index}`;

function outputText(text: string): Json {
  return { type: "output_text", text, annotations: [], logprobs: [] };
}

function message(answer: AnswerInput, status: string, content: Json[]): Json {
  return { type: "message", id: messageId(answer), status, role: "assistant", content };
}

/** The output items of a finished answer: a message when there is text, then a function call per tool call. */
function outputItems(answer: AnswerInput): Json[] {
  const { turn, seq } = answer;
  const items: Json[] = [];
  if (turn.text !== undefined && turn.text !== "") items.push(message(answer, "completed", [outputText(turn.text)]));
  (turn.toolCalls ?? []).forEach((call, i) =>
    items.push({
      type: "function_call",
      id: functionCallId(answer, i),
      call_id: toolCallId(call, "call", seq, i),
      name: call.name,
      arguments: JSON.stringify(call.input ?? {}),
      status: "completed",
    }),
  );
  return items;
}

export function responsesAnswer(answer: AnswerInput): unknown {
  return response(answer, statusOf(answer), outputItems(answer), responsesUsage(answer.usage));
}

/**
 * The event sequence: `response.created` and `response.in_progress` (no
 * usage yet), each output item added, its text streamed and done, then
 * `response.completed` (or `response.incomplete`) with the whole response and
 * its usage. Every event carries its `sequence_number`.
 */
export function responsesStream(answer: AnswerInput): StreamFrame[] {
  const frames: StreamFrame[] = [];
  let sequence = 0;
  const event = (type: string, data: Json): void => {
    frames.push(sse(type, { type, sequence_number: sequence++, ...data }));
  };
  const cutHere = cutOnce(answer.turn, frames);
  const items = outputItems(answer);
  event("response.created", { response: response(answer, "in_progress", [], null) });
  event("response.in_progress", { response: response(answer, "in_progress", [], null) });
  items.forEach((item, outputIndex) => {
    const id = String(item.id);
    if (item.type === "message") {
      const text = answer.turn.text ?? "";
      event("response.output_item.added", { output_index: outputIndex, item: message(answer, "in_progress", []) });
      event("response.content_part.added", {
        item_id: id,
        output_index: outputIndex,
        content_index: 0,
        part: outputText(""),
      });
      const parts = chunks(text);
      parts.forEach((part, i) => {
        if (i === Math.ceil(parts.length / 2)) cutHere();
        event("response.output_text.delta", {
          item_id: id,
          output_index: outputIndex,
          content_index: 0,
          delta: part,
          logprobs: [],
        });
      });
      if (parts.length === 1) cutHere();
      event("response.output_text.done", {
        item_id: id,
        output_index: outputIndex,
        content_index: 0,
        text,
        logprobs: [],
      });
      event("response.content_part.done", {
        item_id: id,
        output_index: outputIndex,
        content_index: 0,
        part: outputText(text),
      });
    } else {
      const args = String(item.arguments);
      event("response.output_item.added", {
        output_index: outputIndex,
        item: { ...item, arguments: "", status: "in_progress" },
      });
      for (const part of chunks(args))
        event("response.function_call_arguments.delta", { item_id: id, output_index: outputIndex, delta: part });
      cutHere();
      event("response.function_call_arguments.done", {
        item_id: id,
        output_index: outputIndex,
        name: item.name,
        arguments: args,
      });
    }
    event("response.output_item.done", { output_index: outputIndex, item });
  });
  cutHere();
  const status = statusOf(answer);
  event(status === "completed" ? "response.completed" : "response.incomplete", {
    response: response(answer, status, items, responsesUsage(answer.usage)),
  });
  return frames;
}

/**
 * Answers of the model in a Responses input: each run of the model's own
 * items (assistant messages, function calls, reasoning) between the
 * caller's items is one turn. An input that is a string, or a conversation
 * kept by the provider (`previous_response_id`), holds none.
 */
function modelTurns(body: Json): number {
  const input = body.input;
  if (!Array.isArray(input)) return 0;
  let turns = 0;
  let inTurn = false;
  for (const item of input) {
    const { role, type } = (item ?? {}) as { role?: unknown; type?: unknown };
    const fromModel =
      role === "assistant" || type === "function_call" || type === "reasoning" || type === "custom_tool_call";
    if (fromModel && !inTurn) turns += 1;
    inTurn = fromModel;
  }
  return turns;
}

export const OPENAI_RESPONSES: ScriptedAnswerFormat = {
  error: openAiError,
  whole: responsesAnswer,
  stream: (answer) => responsesStream(answer),
  // Usage comes with the response's end only.
  cutUsage: () => ({}),
  modelTurns,
};
