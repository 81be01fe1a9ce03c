// What the trace relay passes on of one session's OTLP trace export. A
// harness writes its spans itself, so as they come they could claim to be the
// orchestrator's (`service.name`), another session's or job's
// (`oz0.session.id`, `oz0.job.id`), or join another job's trace whose id the
// harness learnt: a made-up `permission` span would then sit in that trace as
// if the control plane had recorded it. The relay reads each export and
// passes on only the spans of the session's own trace (the one its request
// continues), under a resource that says which session and job sent them;
// the `oz0.` resource attributes are the sandbox's to set, and a
// `service.name` of the control plane's (`oz0-orchestrator`, …) is marked as
// the harness's (`harness:oz0-orchestrator`). An export keeps its encoding (OTLP/HTTP protobuf or
// JSON), as the collector was asked to take it.
import { create, fromBinary, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  ExportTraceServiceRequestSchema,
  ExportTraceServiceResponseSchema,
  type ExportTraceServiceRequest,
} from "@oz0/proto/opentelemetry/proto/collector/trace/v1/trace_service_pb";
import { KeyValueSchema, type KeyValue } from "@oz0/proto/opentelemetry/proto/common/v1/common_pb";
import { ResourceSchema } from "@oz0/proto/opentelemetry/proto/resource/v1/resource_pb";

/** Who sent an export, from its path (telemetry-relay.ts): what its spans are stamped and checked with. */
export interface SessionTraceIdentity {
  sessionId: string;
  jobId: string;
  /** The trace the session's request continues, 32 lowercase hex digits; "" when it was given none. */
  traceId: string;
}

/** The export's body is not an OTLP ExportTraceServiceRequest in the encoding it says (answered 400). */
export class UnreadableExportError extends Error {}

/** The resource attribute namespace the sandbox stamps; a session's own `oz0.` attributes are dropped. */
const STAMPED_NAMESPACE = "oz0.";
/**
 * The control plane's service names (each service's main.ts): a session's
 * resource under one, or a look-alike (another case, spaces, a suffix), is
 * renamed `harness:<name>`. Harnesses' own `oz0-` names (`oz0-fake-harness`)
 * stay.
 */
const CONTROL_PLANE_SERVICES = ["oz0-orchestrator", "oz0-sandbox", "oz0-llm-proxy", "oz0-events"];
const isControlPlaneName = (name: string): boolean => {
  const plain = name.toLowerCase().replace(/\s/g, "");
  return CONTROL_PLANE_SERVICES.some((service) => plain.startsWith(service));
};

export interface StampedExport {
  /** The export to pass on, in the encoding it came in; undefined when no span is left to pass. */
  body: Uint8Array | undefined;
  /** Spans passed on. */
  spans: number;
  /** Spans dropped: not in the session's trace. */
  rejectedSpans: number;
}

/** Reads one session's export, keeps the spans of its trace and stamps their resource. */
export function stampSessionExport(options: {
  body: Uint8Array;
  json: boolean;
  session: SessionTraceIdentity;
}): StampedExport {
  const { session } = options;
  const request = readExport(options.body, options.json);
  let spans = 0;
  let rejectedSpans = 0;
  request.resourceSpans = request.resourceSpans.filter((resourceSpans) => {
    resourceSpans.scopeSpans = resourceSpans.scopeSpans.filter((scopeSpans) => {
      const before = scopeSpans.spans.length;
      scopeSpans.spans = scopeSpans.spans.filter((span) => hex(span.traceId) === session.traceId);
      rejectedSpans += before - scopeSpans.spans.length;
      spans += scopeSpans.spans.length;
      return scopeSpans.spans.length > 0;
    });
    if (resourceSpans.scopeSpans.length === 0) return false;
    const resource = resourceSpans.resource ?? create(ResourceSchema);
    resource.attributes = stampedAttributes(resource.attributes, session);
    resourceSpans.resource = resource;
    return true;
  });
  if (spans === 0) return { body: undefined, spans, rejectedSpans };
  return { body: writeExport(request, options.json), spans, rejectedSpans };
}

/** The answer for spans the relay dropped, as an OTLP partial success (in the export's encoding). */
export function partialSuccessAnswer(options: { rejectedSpans: number; traceId: string; json: boolean }): Uint8Array {
  const answer = create(ExportTraceServiceResponseSchema, {
    partialSuccess: {
      rejectedSpans: BigInt(options.rejectedSpans),
      errorMessage:
        options.traceId === ""
          ? "this session was given no trace to continue: its spans are not relayed"
          : `only spans of the session's own trace (${options.traceId}, its TRACEPARENT) are relayed`,
    },
  });
  return options.json
    ? new TextEncoder().encode(JSON.stringify(toJson(ExportTraceServiceResponseSchema, answer)))
    : toBinary(ExportTraceServiceResponseSchema, answer);
}

function stampedAttributes(attributes: KeyValue[], session: SessionTraceIdentity): KeyValue[] {
  const kept = attributes.filter((attribute) => !attribute.key.startsWith(STAMPED_NAMESPACE));
  for (const attribute of kept) {
    const value = attribute.value?.value;
    if (attribute.key === "service.name" && value?.case === "stringValue" && isControlPlaneName(value.value))
      value.value = `harness:${value.value}`;
  }
  const stamp = (key: string, value: string): KeyValue =>
    create(KeyValueSchema, { key, value: { value: { case: "stringValue", value } } });
  return [...kept, stamp("oz0.session.id", session.sessionId), stamp("oz0.job.id", session.jobId)];
}

function readExport(body: Uint8Array, json: boolean): ExportTraceServiceRequest {
  try {
    if (!json) return fromBinary(ExportTraceServiceRequestSchema, body);
    const parsed = JSON.parse(new TextDecoder().decode(body)) as JsonValue;
    // OTLP/JSON writes trace and span ids in hex where protobuf's JSON mapping has base64.
    mapIds(parsed, (id) => {
      if (!/^(?:[0-9a-fA-F]{2})*$/.test(id)) throw new Error(`a trace or span id is not hex: ${JSON.stringify(id)}`);
      return Buffer.from(id, "hex").toString("base64");
    });
    return fromJson(ExportTraceServiceRequestSchema, parsed, { ignoreUnknownFields: true });
  } catch (error) {
    throw new UnreadableExportError(
      `the body is not an OTLP trace export in ${json ? "JSON" : "protobuf"} (${(error as Error).message}); export with an OpenTelemetry OTLP/HTTP exporter`,
    );
  }
}

function writeExport(request: ExportTraceServiceRequest, json: boolean): Uint8Array {
  if (!json) return toBinary(ExportTraceServiceRequestSchema, request);
  // OTLP/JSON: enums as numbers, ids in hex.
  const written = toJson(ExportTraceServiceRequestSchema, request, { enumAsInteger: true });
  mapIds(written, (id) => Buffer.from(id, "base64").toString("hex"));
  return new TextEncoder().encode(JSON.stringify(written));
}

function hex(id: Uint8Array): string {
  return Buffer.from(id.buffer, id.byteOffset, id.byteLength).toString("hex");
}

type JsonRecord = { [key: string]: JsonValue };
const isRecord = (value: JsonValue | undefined): value is JsonRecord =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const records = (value: JsonValue | undefined): JsonRecord[] => (Array.isArray(value) ? value.filter(isRecord) : []);

/** Rewrites, in place, the trace and span ids of an export's spans and their links (an OTLP/JSON body). */
function mapIds(exported: JsonValue, map: (id: string) => string): void {
  const rewrite = (record: JsonRecord, keys: readonly string[]): void => {
    for (const key of keys) {
      const id = record[key];
      if (typeof id === "string") record[key] = map(id);
    }
  };
  if (!isRecord(exported)) return;
  for (const resourceSpans of records(exported["resourceSpans"]))
    for (const scopeSpans of records(resourceSpans["scopeSpans"]))
      for (const span of records(scopeSpans["spans"])) {
        rewrite(span, ["traceId", "spanId", "parentSpanId"]);
        for (const link of records(span["links"])) rewrite(link, ["traceId", "spanId"]);
      }
}
