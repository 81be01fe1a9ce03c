// A small OTLP/HTTP receiver for tests and benchmarks: services export to it
// with OTEL_EXPORTER_OTLP_PROTOCOL=http/json, and a test reads back every span
// (and metric) it received, in process or over GET /spans and /metrics when it
// runs as its own process (bin/otlp-receiver.mjs). Protobuf bodies are refused
// with 415 so a misconfigured exporter fails loudly instead of silently.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";

export type AttributeValue = string | number | boolean | AttributeValue[] | null;

/** One span as received, flattened: ids in hex, attributes as a plain object. */
export interface ReceivedSpan {
  service: string;
  scope: string;
  traceId: string;
  spanId: string;
  /** Empty for a root span. */
  parentSpanId: string;
  name: string;
  kind: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes: Record<string, AttributeValue>;
  statusCode: number;
  /** The status's description (empty when none). */
  statusMessage: string;
  /** The spans this span links to (OpenTelemetry span links), ids in hex. */
  links: { traceId: string; spanId: string; attributes: Record<string, AttributeValue> }[];
}

/** One metric data point as received. */
export interface ReceivedMetricPoint {
  service: string;
  name: string;
  attributes: Record<string, AttributeValue>;
  /** Counters and gauges: the value; histograms: the sum. */
  value: number;
  /** Histograms: the number of recordings. */
  count?: number;
}

export interface OtlpReceiver {
  /** Base URL for OTEL_EXPORTER_OTLP_ENDPOINT. */
  readonly url: string;
  spans(): ReceivedSpan[];
  metrics(): ReceivedMetricPoint[];
  /** Export requests received so far (traces, metrics and logs). */
  readonly requests: number;
  close(): Promise<void>;
}

interface OtlpKeyValue {
  key: string;
  value?: OtlpAnyValue;
}
interface OtlpAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string | number;
  doubleValue?: number;
  arrayValue?: { values?: OtlpAnyValue[] };
  bytesValue?: string;
}

function valueOf(v: OtlpAnyValue | undefined): AttributeValue {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(valueOf);
  if (v.bytesValue !== undefined) return v.bytesValue;
  return null;
}

function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list ?? []) out[kv.key] = valueOf(kv.value);
  return out;
}

/** OTLP/JSON ids are hex; some exporters send base64 (the protobuf JSON mapping): normalise to hex. */
function hexId(id: string | undefined, bytes: number): string {
  if (!id) return "";
  if (id.length === bytes * 2 && /^[\da-f]+$/i.test(id)) return id.toLowerCase();
  return Buffer.from(id, "base64").toString("hex");
}

interface ResourceScoped<T> {
  resource?: { attributes?: OtlpKeyValue[] };
  scopeSpans?: { scope?: { name?: string }; spans?: T[] }[];
  scopeMetrics?: { scope?: { name?: string }; metrics?: T[] }[];
}

interface OtlpSpan {
  traceId?: string;
  spanId?: string;
  parentSpanId?: string;
  name?: string;
  kind?: number;
  startTimeUnixNano?: string | number;
  endTimeUnixNano?: string | number;
  attributes?: OtlpKeyValue[];
  status?: { code?: number; message?: string };
  links?: { traceId?: string; spanId?: string; attributes?: OtlpKeyValue[] }[];
}

interface OtlpPoint {
  attributes?: OtlpKeyValue[];
  asInt?: string | number;
  asDouble?: number;
  sum?: number;
  count?: string | number;
}
interface OtlpMetric {
  name?: string;
  sum?: { dataPoints?: OtlpPoint[] };
  gauge?: { dataPoints?: OtlpPoint[] };
  histogram?: { dataPoints?: OtlpPoint[] };
}

function serviceOf(resource: { attributes?: OtlpKeyValue[] } | undefined): string {
  return String(attributesOf(resource?.attributes)["service.name"] ?? "");
}

export function decodeTraces(body: { resourceSpans?: ResourceScoped<OtlpSpan>[] }): ReceivedSpan[] {
  const out: ReceivedSpan[] = [];
  for (const rs of body.resourceSpans ?? []) {
    const service = serviceOf(rs.resource);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          service,
          scope: ss.scope?.name ?? "",
          traceId: hexId(s.traceId, 16),
          spanId: hexId(s.spanId, 8),
          parentSpanId: hexId(s.parentSpanId, 8),
          name: s.name ?? "",
          kind: s.kind ?? 0,
          startTimeUnixNano: String(s.startTimeUnixNano ?? "0"),
          endTimeUnixNano: String(s.endTimeUnixNano ?? "0"),
          attributes: attributesOf(s.attributes),
          statusCode: s.status?.code ?? 0,
          statusMessage: s.status?.message ?? "",
          links: (s.links ?? []).map((link) => ({
            traceId: hexId(link.traceId, 16),
            spanId: hexId(link.spanId, 8),
            attributes: attributesOf(link.attributes),
          })),
        });
      }
    }
  }
  return out;
}

export function decodeMetrics(body: { resourceMetrics?: ResourceScoped<OtlpMetric>[] }): ReceivedMetricPoint[] {
  const out: ReceivedMetricPoint[] = [];
  for (const rm of body.resourceMetrics ?? []) {
    const service = serviceOf(rm.resource);
    for (const sm of rm.scopeMetrics ?? []) {
      for (const m of sm.metrics ?? []) {
        const name = m.name ?? "";
        for (const p of m.sum?.dataPoints ?? m.gauge?.dataPoints ?? []) {
          out.push({
            service,
            name,
            attributes: attributesOf(p.attributes),
            value: Number(p.asInt ?? p.asDouble ?? 0),
          });
        }
        for (const p of m.histogram?.dataPoints ?? []) {
          out.push({
            service,
            name,
            attributes: attributesOf(p.attributes),
            value: p.sum ?? 0,
            count: Number(p.count ?? 0),
          });
        }
      }
    }
  }
  return out;
}

function readBody(req: http.IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

export async function startOtlpReceiver(options: { host?: string; port?: number } = {}): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const points: ReceivedMetricPoint[] = [];
  let requests = 0;
  const send = (res: http.ServerResponse, status: number, body: unknown): void => {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": String(Buffer.byteLength(text)) });
    res.end(text);
  };
  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const url = new URL(req.url ?? "/", "http://receiver");
    if (req.method === "GET" && url.pathname === "/spans") return send(res, 200, spans);
    if (req.method === "GET" && url.pathname === "/metrics") return send(res, 200, points);
    if (req.method !== "POST" || !["/v1/traces", "/v1/metrics", "/v1/logs"].includes(url.pathname))
      return send(res, 404, { error: `no route for ${req.method} ${url.pathname}` });
    if (!String(req.headers["content-type"] ?? "").includes("json")) {
      return send(res, 415, {
        error: "this test receiver reads OTLP/JSON only: set OTEL_EXPORTER_OTLP_PROTOCOL=http/json",
      });
    }
    let raw = await readBody(req);
    if (req.headers["content-encoding"] === "gzip") raw = gunzipSync(raw);
    const body = JSON.parse(raw.toString("utf8") || "{}") as Record<string, never>;
    requests += 1;
    if (url.pathname === "/v1/traces") spans.push(...decodeTraces(body));
    if (url.pathname === "/v1/metrics") points.push(...decodeMetrics(body));
    send(res, 200, {});
  };
  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => send(res, 400, { error: (error as Error).message }));
  });
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, options.host ?? "127.0.0.1", resolve));
  const address = server.address() as AddressInfo;
  return {
    url: `http://${address.address}:${address.port}`,
    spans: () => [...spans],
    metrics: () => [...points],
    get requests() {
      return requests;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** What a test reads from a receiver running as its own process. */
export async function fetchReceived(url: string): Promise<{ spans: ReceivedSpan[]; metrics: ReceivedMetricPoint[] }> {
  const [spans, metrics] = await Promise.all([fetch(`${url}/spans`), fetch(`${url}/metrics`)]);
  return { spans: (await spans.json()) as ReceivedSpan[], metrics: (await metrics.json()) as ReceivedMetricPoint[] };
}
