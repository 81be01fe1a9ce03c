// Where this process's OTLP trace exporter sends spans, read from the
// standard OTEL_* variables the way the OpenTelemetry SDK reads them, so that
// a relay (the sandbox's, for its sessions) sends to the very same place with
// the very same headers. Only OTLP over HTTP can be relayed: a gRPC collector
// endpoint, or traces switched off, give no target.

/** The collector's traces URL and the headers every export carries (credentials, often). */
export interface OtlpTracesTarget {
  url: string;
  headers: Record<string, string>;
  /** How exports are encoded: what the collector was configured to take. */
  protocol: "http/protobuf" | "http/json";
}

/**
 * The traces target of `env`, or undefined when this process exports no
 * traces over OTLP/HTTP. Throws for a malformed endpoint or header list,
 * naming the variable.
 */
export function otlpTracesTarget(env: NodeJS.ProcessEnv = process.env): OtlpTracesTarget | undefined {
  if (env.OTEL_SDK_DISABLED === "true") return undefined;
  const exporter = env.OTEL_TRACES_EXPORTER;
  if (
    exporter !== undefined &&
    exporter !== "" &&
    !exporter
      .split(",")
      .map((name) => name.trim())
      .includes("otlp")
  )
    return undefined;
  const protocol = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL || env.OTEL_EXPORTER_OTLP_PROTOCOL || "http/protobuf";
  if (protocol !== "http/protobuf" && protocol !== "http/json") return undefined;
  // The signal's own endpoint is used as is; the base endpoint gets the signal's path (OTLP exporter spec).
  const own = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  const base = env.OTEL_EXPORTER_OTLP_ENDPOINT;
  let url: string;
  let variable: string;
  if (own) [url, variable] = [own, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"];
  else if (base) [url, variable] = [`${base.replace(/\/+$/, "")}/v1/traces`, "OTEL_EXPORTER_OTLP_ENDPOINT"];
  else return undefined;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new Error(
      `${variable} is not a URL (${JSON.stringify(url)}); set it to the collector's OTLP/HTTP address, for example http://127.0.0.1:4318`,
    );
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new Error(`${variable} must be an http:// or https:// URL for OTLP over HTTP, not ${parsed.protocol}`);
  }
  return {
    url: parsed.toString(),
    protocol,
    headers: {
      ...headerList(env.OTEL_EXPORTER_OTLP_HEADERS, "OTEL_EXPORTER_OTLP_HEADERS"),
      ...headerList(env.OTEL_EXPORTER_OTLP_TRACES_HEADERS, "OTEL_EXPORTER_OTLP_TRACES_HEADERS"),
    },
  };
}

/** `name=value,name2=value2`, values percent-encoded (W3C baggage form, as the SDK reads it). */
function headerList(value: string | undefined, variable: string): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!value) return headers;
  for (const pair of value.split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    if (at <= 0)
      throw new Error(`${variable} has an entry without a name=value form; write it as name=value,name2=value2`);
    const name = pair.slice(0, at).trim().toLowerCase();
    try {
      headers[name] = decodeURIComponent(pair.slice(at + 1).trim());
    } catch {
      throw new Error(`${variable}: the value of ${name} is not valid percent-encoding`);
    }
  }
  return headers;
}
