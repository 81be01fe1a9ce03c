// Which of a client's request headers reach the provider. An allowlist per
// API (its wire format's `forwardedHeaders`), not a list of what to drop:
// anything a harness (or an agent steering it) puts in a header it invents,
// the session token included, would otherwise leave for a third party's logs.
// The proxy sets the provider's key, `content-type`, `accept-encoding` and the
// trace context itself.
import type { WireFormat } from "./wire-formats/wire-format.js";

/**
 * The headers to send upstream for a client request: the allowlisted ones
 * the client sent, minus any whose value carries one of the credentials the
 * request presented (a harness that echoes its session token into
 * user-agent must not hand it on), plus what the proxy always sets.
 */
export function forwardedHeaders(options: {
  incoming: Readonly<Record<string, string | string[] | undefined>>;
  format: WireFormat;
  /** The session token as presented (x-api-key, Authorization). */
  credentials: readonly string[];
}): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of options.format.forwardedHeaders) {
    const value = options.incoming[name];
    if (value === undefined) continue;
    const joined = Array.isArray(value) ? value.join(", ") : value;
    if (options.credentials.some((credential) => joined.includes(credential))) continue;
    out[name] = joined;
  }
  // The proxy reads every answer to meter and scrub it: ask for it uncompressed.
  out["accept-encoding"] = "identity";
  out["content-type"] = "application/json";
  for (const [name, value] of Object.entries(options.format.defaultHeaders ?? {})) if (!out[name]) out[name] = value;
  return out;
}
