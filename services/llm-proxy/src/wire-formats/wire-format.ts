// What the proxy needs to know of one provider API ("wire format"): the route
// it serves, how its requests say which model and whether to stream, its error
// shape, where its answers and streams report usage, and which of its streamed
// texts a key could be cut across. The core (routing, the session token,
// budgets, retries, metering, forwarding) asks the format and never names one;
// every format is one module in this folder and one entry in formats.ts.
import type { SecretScrubber } from "@oz0/serving";
import type { ProviderSideUse } from "../provider-side-features.js";
import type { TokenUsage } from "../proxy-store.js";

/**
 * The error types the proxy answers with itself; `budget_exhausted` and `model_calls_exhausted` (the session's
 * limit of model calls, its agent's limits.max_steps) are the types a session ends on.
 */
export type ProxyErrorType =
  | "authentication_error"
  | "permission_error"
  | "budget_exhausted"
  | "model_calls_exhausted"
  | "invalid_request_error"
  | "not_found_error"
  | "rate_limit_error"
  | "overloaded_error"
  | "api_error";

/** A request body, read a top-level field at a time. */
export interface RequestBody {
  /** The field's JSON value, or undefined when the body has none. */
  field(name: string): unknown;
  /** Every copy's value of a field whose name repeats, in order. */
  values(name: string): unknown[];
  /** The objects in an array field, each read a field at a time; undefined for one that cannot be read. */
  objectsIn(name: string): (RequestBody | undefined)[];
  /** Whether a field's bytes hold `needle` as they are. */
  mentions(name: string, needle: string): boolean;
  /** Whether a field writes an ASCII character as a `\u00XX` escape (a search of its bytes could miss a name). */
  escapesAscii(name: string): boolean;
}

/** One provider API the proxy serves at `/{provider}/v1/{route}`. */
export interface WireFormat {
  /** How metering rows and usage events name it (their `wire`). */
  readonly name: string;
  /** The path after `/{provider}` and the optional `/v1`, for example `chat/completions`. */
  readonly route: string;
  /** Request headers passed on to the provider as the client sent them; every other header stays at the proxy. */
  readonly forwardedHeaders: readonly string[];
  /** Headers sent upstream when the client sent none of that name. */
  readonly defaultHeaders?: Readonly<Record<string, string>>;
  /** How the provider's key goes upstream unless the provider's configuration says (`auth`). */
  readonly keyHeader: "x-api-key" | "bearer";
  /** The body of an error the proxy answers itself, in the shape the API's SDKs read. */
  errorBody(type: ProxyErrorType, message: string): unknown;
  /** How model calls of this API are metered; absent, a call is passed through with the key and not metered (count_tokens). */
  readonly calls?: ModelCalls;
  /** What a passed-through request (no `calls`) asks the provider to do on its own side; refused unless allowed. */
  providerSide?(body: RequestBody, headers: Readonly<Record<string, string | string[] | undefined>>): ProviderSideUse[];
}

/** The metered side of a wire format. */
export interface ModelCalls {
  /** What the proxy reads of a request before it goes upstream; `headers`: the client's (the betas it asks for). */
  readRequest(body: RequestBody, headers: Readonly<Record<string, string | string[] | undefined>>): WireRequest;
  /** The usage a whole answer (its parsed JSON) reports; undefined when it reports none (then it is estimated). */
  answerUsage(answer: unknown): TokenUsage | undefined;
  /** Why a whole answer ended, in the API's words (`end_turn`, `tool_calls`, `max_output_tokens`, …). */
  finishReason(answer: unknown): string | undefined;
  /** Which answer a whole answer is: its id and the model that gave it. */
  responseOf(answer: unknown): ResponseIdentity;
  /** A scrubber for one stream, reading each streamed text across its deltas (only made when there is a key to scrub). */
  streamScrubber(scrubber: SecretScrubber): StreamScrubber;
  /** The event that ends a stream the proxy cuts off (the budget ran out). */
  streamErrorEvent(type: ProxyErrorType, message: string): string;
}

/** What a format read from one request. */
export interface WireRequest {
  model: string | undefined;
  stream: boolean;
  /**
   * The most output tokens the provider may bill for the request, when the request bounds them (the
   * budget reserves them, and a stream's estimate counts no more): every choice's, where it asks for several.
   */
  maxOutputTokens: number | undefined;
  /**
   * How many answers the request asks for (OpenAI chat's `n`), when more than one: a request that does not bound
   * its output has the default bound reserved for each.
   */
  answers?: number;
  /** What the request asks the provider to do on its own side (provider-side-features.ts); refused unless allowed. */
  providerSide: ProviderSideUse[];
  /**
   * The top-level fields that bound each answer's output to `tokens` (reasoning included): set on a stream whose
   * budget hold covers less than its limit, so the provider cannot bill past the hold.
   */
  outputLimitFields(tokens: number): Readonly<Record<string, unknown>>;
  /** The fewest output tokens {@link outputLimitFields} can bound this request to (Anthropic's extended thinking: 1,025). */
  minBoundedOutput?: number;
  /** Top-level fields the proxy sets before the request goes upstream (OpenAI streams are asked for their usage). */
  upstreamFields?: Readonly<Record<string, unknown>>;
  /** A meter for one attempt's stream. */
  streamMeter(): StreamMeter;
}

/** Usage read so far from a stream. */
export interface StreamMeterReading {
  usage: TokenUsage;
  /** True when the provider's final counts never came and output was estimated. */
  estimated: boolean;
}

/** Reads one stream event by event, as the provider sent them. */
export interface StreamMeter {
  /** Reads one whole SSE event; returns what to forward to the client (the event, or a rewrite of it), or undefined to drop it. */
  onEvent(event: string): string | undefined;
  /** True once the event that ends a complete stream arrived. */
  readonly complete: boolean;
  /** Why the stream's answer ended, once the stream said. */
  readonly finishReason: string | undefined;
  /** The answer's id and model, once the stream said. */
  readonly response: ResponseIdentity;
  /** What was used so far; `estimatedInput` stands in for the input until the provider reported it. */
  reading(estimatedInput: number): StreamMeterReading;
}

/** Scrubs a stream event by event. */
export interface StreamScrubber {
  /** What to forward for one whole upstream event: "" (nothing yet), the event, or held text and then the event. */
  push(event: string): string;
}

/** An answer's id and the model that gave it, as the provider named them (`gen_ai.response.id`, `gen_ai.response.model`). */
export interface ResponseIdentity {
  id?: string | undefined;
  model?: string | undefined;
}

/** The `id` and `model` of an answer object (every API puts them there: the answer, a chunk, a stream's message or response). */
export function responseIdentity(value: unknown): ResponseIdentity {
  if (typeof value !== "object" || value === null) return {};
  const { id, model } = value as { id?: unknown; model?: unknown };
  return {
    ...(typeof id === "string" && id ? { id } : {}),
    ...(typeof model === "string" && model ? { model } : {}),
  };
}
