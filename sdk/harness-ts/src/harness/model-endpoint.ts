// The model endpoint a harness hands to any Anthropic- or OpenAI-compatible
// client: the runtime's base URLs, the session token as the API key, and the
// headers every call must carry (protocol rule 4).
import type { SessionRequest } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { traceContextFrom, type TraceContext } from "./trace-context.js";

/** Where and how this session calls models. */
export interface ModelEndpoint {
  /** Base URL of an Anthropic Messages API: `POST ${anthropicBaseUrl}/v1/messages`. */
  readonly anthropicBaseUrl: string;
  /**
   * Base URL of the OpenAI APIs, as the runtime gave it: it ends in `/v1`
   * (`{proxy}/openai/v1`), as OpenAI's SDKs expect, so calls go to
   * `POST ${openaiBaseUrl}/chat/completions` or `POST ${openaiBaseUrl}/responses`.
   */
  readonly openaiBaseUrl: string;
  /** The session token: pass it as the client's API key. It is not a provider key. */
  readonly apiKey: string;
  /**
   * Headers for every model call: the request's `llm.headers` (at least
   * `Oz0-Job` and `Oz0-Agent`) plus the token as both `x-api-key` and
   * `Authorization: Bearer`, so either wire format authenticates.
   */
  readonly headers: Readonly<Record<string, string>>;
  /**
   * Only the Oz0 headers (no token), for clients that set the key themselves
   * (`defaultHeaders`); with the session's `traceparent` (and `tracestate`),
   * so the LLM proxy's span continues the session's trace.
   */
  readonly extraHeaders: Readonly<Record<string, string>>;
  /** The model id without its provider, e.g. `claude-sonnet-5-5` for `anthropic/claude-sonnet-5-5`. */
  readonly model: string;
  /** The provider part of the primary model, e.g. `anthropic`. */
  readonly provider: string;
  /** Fallback models as `provider/model`, in order. */
  readonly fallbacks: readonly string[];
}

/**
 * Builds the endpoint from the request. `trace` defaults to the request's own
 * trace context, so harnesses that build the endpoint themselves (Claude Code,
 * ACP agents) send `traceparent` too.
 */
export function modelEndpointFrom(request: SessionRequest, options: { trace?: TraceContext } = {}): ModelEndpoint {
  const llm = request.llm;
  const extraHeaders: Record<string, string> = { ...(llm?.headers ?? {}) };
  const trace = options.trace ?? traceContextFrom(request, {});
  for (const [name, value] of Object.entries(trace.carrier))
    if (!hasHeader(extraHeaders, name)) extraHeaders[name] = value;
  // The runtime sends these, but a harness must never call without them.
  if (!hasHeader(extraHeaders, "oz0-job") && request.jobId !== "") extraHeaders["Oz0-Job"] = request.jobId;
  if (!hasHeader(extraHeaders, "oz0-agent") && request.agent?.name) extraHeaders["Oz0-Agent"] = request.agent.name;
  const token = llm?.token ?? "";
  const primary = request.model?.primary ?? "";
  const slash = primary.indexOf("/");
  return {
    anthropicBaseUrl: trimSlash(llm?.anthropicBaseUrl ?? ""),
    openaiBaseUrl: trimSlash(llm?.openaiBaseUrl ?? ""),
    apiKey: token,
    headers: { ...extraHeaders, "x-api-key": token, authorization: `Bearer ${token}` },
    extraHeaders,
    model: slash === -1 ? primary : primary.slice(slash + 1),
    provider: slash === -1 ? "" : primary.slice(0, slash),
    fallbacks: [...(request.model?.fallbacks ?? [])],
  };
}

function hasHeader(headers: Record<string, string>, lowerName: string): boolean {
  return Object.keys(headers).some((name) => name.toLowerCase() === lowerName);
}

function trimSlash(url: string): string {
  return url.endsWith("/") ? url.slice(0, -1) : url;
}
