// Which of a client's request headers reach the provider. An allowlist per
// API, not a list of what to drop: anything a harness (or an agent steering
// it) puts in a header it invents, the session token included, would
// otherwise leave for a third party's logs. The proxy sets the provider's
// key, `content-type`, `accept-encoding` and the trace context itself.
import type { Wire } from "./wire-errors.js";

/**
 * Headers passed on to the provider, by API. Every other header stays at the
 * proxy: authorization, x-api-key, cookies, Oz0-*, the SDKs' x-stainless-*
 * telemetry, and anything unknown.
 */
export const FORWARDED_REQUEST_HEADERS: Readonly<Record<Wire, readonly string[]>> = {
  anthropic: [
    // The API version and the beta features the request is written against
    // (Claude Code asks for several betas; without them its requests fail).
    "anthropic-version",
    "anthropic-beta",
    "accept",
    // Claude Code identifies itself with these two; the scripted provider
    // tells Claude Code's side calls from an agent's turns by them.
    "user-agent",
    "x-app",
  ],
  // The organization and project of an OpenAI key are the key holder's
  // choice, not a session's: openai-organization and openai-project stay here.
  openai: ["accept", "user-agent"],
};

/** The Messages API version sent when the client names none. */
const DEFAULT_ANTHROPIC_VERSION = "2023-06-01";

/**
 * The headers to send upstream for a client request: the allowlisted ones
 * the client sent, minus any whose value carries one of the credentials the
 * request presented (a harness that echoes its session token into
 * user-agent must not hand it on), plus what the proxy always sets.
 */
export function forwardedHeaders(options: {
  incoming: Readonly<Record<string, string | string[] | undefined>>;
  wire: Wire;
  /** The session token as presented (x-api-key, Authorization). */
  credentials: readonly string[];
}): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of FORWARDED_REQUEST_HEADERS[options.wire]) {
    const value = options.incoming[name];
    if (value === undefined) continue;
    const joined = Array.isArray(value) ? value.join(", ") : value;
    if (options.credentials.some((credential) => joined.includes(credential))) continue;
    out[name] = joined;
  }
  // The proxy reads every answer to meter and scrub it: ask for it uncompressed.
  out["accept-encoding"] = "identity";
  out["content-type"] = "application/json";
  if (options.wire === "anthropic" && !out["anthropic-version"]) out["anthropic-version"] = DEFAULT_ANTHROPIC_VERSION;
  return out;
}
