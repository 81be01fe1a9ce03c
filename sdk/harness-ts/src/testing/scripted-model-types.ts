// The shapes a scripted-model script is written in, shared by every wire format.

/** One tool call the scripted model makes in a turn. */
export interface ScriptedToolCall {
  /** Defaults to a deterministic `toolu_…` / `call_…` id. */
  id?: string;
  name: string;
  input: unknown;
}

/** Token usage a turn reports. */
export interface ScriptedUsage {
  input: number;
  output: number;
  cacheRead?: number;
  cacheWrite?: number;
  /** OpenAI `completion_tokens_details.reasoning_tokens` (Responses: `output_tokens_details.reasoning_tokens`). */
  reasoning?: number;
}

/** What the scripted model answers to one model call. */
export interface ScriptedTurn {
  text?: string;
  toolCalls?: ScriptedToolCall[];
  /** Defaults to counts derived from the request and answer lengths (about 4 characters a token). */
  usage?: ScriptedUsage;
  /**
   * Anthropic stop reason (`end_turn`, `tool_use`, `max_tokens`, …); mapped
   * to OpenAI's finish reason. Defaults to `tool_use` when there are tool calls.
   */
  stopReason?: string;
  /**
   * Answer with an HTTP error instead (429 with `retry-after`, 529 overloaded, …):
   * `body` as given, else an error of the request's API saying `message`.
   */
  fail?: { status: number; body?: unknown; message?: string; headers?: Record<string, string> };
  /** Streaming only: send the start and part of the text, then destroy the socket. */
  cutMidStream?: boolean;
  /** Wait this long before the first byte of the answer; a caller that goes away meanwhile is served (and counted) nothing. */
  delayMs?: number;
}

/** Which API a request used. */
export type ScriptedWireFormat =
  "anthropic-messages" | "anthropic-count-tokens" | "openai-chat-completions" | "openai-responses" | "models";

/** One call the scripted model received. */
export interface ScriptedRequest {
  method: string;
  /** Path without the query string. */
  path: string;
  /** Header names in lower case. */
  headers: Record<string, string>;
  /** The parsed JSON body (undefined when there was none or it was not JSON). */
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  wire: ScriptedWireFormat;
  stream: boolean;
  /** True when the request was answered generically without consuming a scripted turn. */
  sideCall: boolean;
  /** Index of the scripted turn it consumed, when it consumed one. */
  turn?: number;
}

/** A list of turns consumed in order, or a function choosing the turn for each request. */
export type Script = ScriptedTurn[] | ((request: ScriptedRequest) => ScriptedTurn | Promise<ScriptedTurn>);

/** Totals of the usage the scripted model reported to its callers. */
export interface TokensServed {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  reasoning: number;
  /** input + output + cacheRead + cacheWrite. */
  total: number;
}
