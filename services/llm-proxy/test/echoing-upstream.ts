// A provider on loopback that answers in exactly the pieces a test gives it:
// one streamed delta per piece (the scripted model cuts text into 16
// characters, too long to show a key sent a few characters per event), in
// the Anthropic Messages, OpenAI Chat Completions and OpenAI Responses wire
// formats, streamed and whole. It records every request's headers.
import http from "node:http";
import type { AddressInfo } from "node:net";

export interface EchoAnswer {
  /** The answer's text, one streamed delta per piece. */
  text: string[];
  /** A tool call's arguments as JSON text, one streamed delta per piece (whole answers join them). */
  toolJson?: string[];
}

export interface EchoingUpstream {
  url: string;
  requests: { path: string; headers: http.IncomingHttpHeaders; body: Record<string, unknown> }[];
  close(): Promise<void>;
}

function event(name: string, data: unknown): string {
  return `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
}

function anthropicFrames(answer: EchoAnswer, model: string): string[] {
  const frames = [
    event("message_start", {
      type: "message_start",
      message: {
        id: "msg_echo",
        type: "message",
        role: "assistant",
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 1 },
      },
    }),
    event("content_block_start", { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }),
    event("ping", { type: "ping" }),
  ];
  for (const piece of answer.text)
    frames.push(
      event("content_block_delta", {
        type: "content_block_delta",
        index: 0,
        delta: { type: "text_delta", text: piece },
      }),
    );
  frames.push(event("content_block_stop", { type: "content_block_stop", index: 0 }));
  if (answer.toolJson) {
    frames.push(
      event("content_block_start", {
        type: "content_block_start",
        index: 1,
        content_block: { type: "tool_use", id: "toolu_echo", name: "note", input: {} },
      }),
    );
    for (const piece of answer.toolJson)
      frames.push(
        event("content_block_delta", {
          type: "content_block_delta",
          index: 1,
          delta: { type: "input_json_delta", partial_json: piece },
        }),
      );
    frames.push(event("content_block_stop", { type: "content_block_stop", index: 1 }));
  }
  frames.push(
    event("message_delta", {
      type: "message_delta",
      delta: { stop_reason: answer.toolJson ? "tool_use" : "end_turn", stop_sequence: null },
      usage: { output_tokens: 20 },
    }),
    event("message_stop", { type: "message_stop" }),
  );
  return frames;
}

function anthropicMessage(answer: EchoAnswer, model: string): unknown {
  const content: unknown[] = [{ type: "text", text: answer.text.join("") }];
  if (answer.toolJson)
    content.push({ type: "tool_use", id: "toolu_echo", name: "note", input: JSON.parse(answer.toolJson.join("")) });
  return {
    id: "msg_echo",
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: answer.toolJson ? "tool_use" : "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 10, output_tokens: 20 },
  };
}

const USAGE = { prompt_tokens: 10, completion_tokens: 20, total_tokens: 30 };

function openAiFrames(answer: EchoAnswer, model: string, includeUsage: boolean): string[] {
  const base = {
    id: "chatcmpl-echo",
    object: "chat.completion.chunk",
    created: 1_700_000_000,
    model,
    ...(includeUsage ? { usage: null } : {}),
  };
  const chunk = (delta: unknown, finish: string | null = null): string =>
    `data: ${JSON.stringify({ ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] })}\n\n`;
  const frames = [chunk({ role: "assistant", content: "" })];
  for (const piece of answer.text) frames.push(chunk({ content: piece }));
  if (answer.toolJson) {
    frames.push(
      chunk({
        tool_calls: [{ index: 0, id: "call_echo", type: "function", function: { name: "note", arguments: "" } }],
      }),
    );
    for (const piece of answer.toolJson)
      frames.push(chunk({ tool_calls: [{ index: 0, function: { arguments: piece } }] }));
  }
  frames.push(chunk({}, answer.toolJson ? "tool_calls" : "stop"));
  if (includeUsage) frames.push(`data: ${JSON.stringify({ ...base, choices: [], usage: USAGE })}\n\n`);
  frames.push("data: [DONE]\n\n");
  return frames;
}

function openAiCompletion(answer: EchoAnswer, model: string): unknown {
  const toolCalls = answer.toolJson
    ? [{ id: "call_echo", type: "function", function: { name: "note", arguments: answer.toolJson.join("") } }]
    : undefined;
  return {
    id: "chatcmpl-echo",
    object: "chat.completion",
    created: 1_700_000_000,
    model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: answer.text.join(""),
          refusal: null,
          ...(toolCalls ? { tool_calls: toolCalls } : {}),
        },
        logprobs: null,
        finish_reason: toolCalls ? "tool_calls" : "stop",
      },
    ],
    usage: USAGE,
  };
}

const RESPONSES_USAGE = {
  input_tokens: 10,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 20,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 30,
};

function responsesOutput(answer: EchoAnswer): unknown[] {
  const output: unknown[] = [
    {
      type: "message",
      id: "msg_echo",
      status: "completed",
      role: "assistant",
      content: [{ type: "output_text", text: answer.text.join(""), annotations: [] }],
    },
  ];
  if (answer.toolJson)
    output.push({
      type: "function_call",
      id: "fc_echo",
      call_id: "call_echo",
      name: "note",
      arguments: answer.toolJson.join(""),
      status: "completed",
    });
  return output;
}

function responsesAnswer(answer: EchoAnswer, model: string, status = "completed"): Record<string, unknown> {
  return {
    id: "resp_echo",
    object: "response",
    created_at: 1_700_000_000,
    status,
    model,
    output: status === "completed" ? responsesOutput(answer) : [],
    usage: status === "completed" ? RESPONSES_USAGE : null,
  };
}

function responsesFrames(answer: EchoAnswer, model: string): string[] {
  let sequence = 0;
  const frame = (type: string, data: Record<string, unknown>): string =>
    event(type, { type, sequence_number: sequence++, ...data });
  const [message, call] = responsesOutput(answer) as Record<string, unknown>[];
  const text = answer.text.join("");
  const frames = [
    frame("response.created", { response: responsesAnswer(answer, model, "in_progress") }),
    frame("response.output_item.added", { output_index: 0, item: { ...message, status: "in_progress", content: [] } }),
    frame("response.content_part.added", {
      item_id: "msg_echo",
      output_index: 0,
      content_index: 0,
      part: { type: "output_text", text: "", annotations: [] },
    }),
  ];
  for (const piece of answer.text)
    frames.push(
      frame("response.output_text.delta", {
        item_id: "msg_echo",
        output_index: 0,
        content_index: 0,
        delta: piece,
        logprobs: [],
      }),
    );
  frames.push(
    frame("response.output_text.done", { item_id: "msg_echo", output_index: 0, content_index: 0, text, logprobs: [] }),
    frame("response.content_part.done", {
      item_id: "msg_echo",
      output_index: 0,
      content_index: 0,
      part: { type: "output_text", text, annotations: [] },
    }),
    frame("response.output_item.done", { output_index: 0, item: message }),
  );
  if (answer.toolJson && call) {
    frames.push(
      frame("response.output_item.added", { output_index: 1, item: { ...call, arguments: "", status: "in_progress" } }),
    );
    for (const piece of answer.toolJson)
      frames.push(
        frame("response.function_call_arguments.delta", { item_id: "fc_echo", output_index: 1, delta: piece }),
      );
    frames.push(
      frame("response.function_call_arguments.done", {
        item_id: "fc_echo",
        output_index: 1,
        name: "note",
        arguments: answer.toolJson.join(""),
      }),
      frame("response.output_item.done", { output_index: 1, item: call }),
    );
  }
  frames.push(frame("response.completed", { response: responsesAnswer(answer, model) }));
  return frames;
}

/** Starts the provider; `answer` picks what each request gets. */
export async function startEchoingUpstream(options: {
  answer: (request: { path: string; body: Record<string, unknown> }) => EchoAnswer;
}): Promise<EchoingUpstream> {
  const requests: EchoingUpstream["requests"] = [];
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (part: Buffer) => parts.push(part));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(parts).toString("utf8") || "{}") as Record<string, unknown>;
      const path = new URL(req.url ?? "/", "http://upstream").pathname;
      requests.push({ path, headers: req.headers, body });
      const model = typeof body.model === "string" ? body.model : "echo";
      if (path.endsWith("/messages/count_tokens")) {
        // The key it was sent, echoed in a header the proxy passes on.
        res.writeHead(200, { "content-type": `application/json; echo=${String(req.headers["x-api-key"])}` });
        res.end(JSON.stringify({ input_tokens: 10 }));
        return;
      }
      const answer = options.answer({ path, body });
      const api = path.endsWith("/chat/completions") ? "chat" : path.endsWith("/responses") ? "responses" : "messages";
      if (body.stream !== true) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify(
            api === "chat"
              ? openAiCompletion(answer, model)
              : api === "responses"
                ? responsesAnswer(answer, model)
                : anthropicMessage(answer, model),
          ),
        );
        return;
      }
      const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      const frames =
        api === "chat"
          ? openAiFrames(answer, model, includeUsage)
          : api === "responses"
            ? responsesFrames(answer, model)
            : anthropicFrames(answer, model);
      // One write per event, as a provider flushes them.
      for (const frame of frames) res.write(frame);
      res.end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
