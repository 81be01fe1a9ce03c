// Decoding of SessionEvent lines, the host's hot path. The common event kinds
// in their canonical proto3 JSON form are built directly; anything else
// (snake_case names, unknown fields, timestamps, Value fields, odd number
// forms) goes through protobuf-es's fromJson, which is the reference. A test
// checks both produce equal messages. fromJson alone costs about twice a
// JSON.parse; the fast path keeps the host near plain parsing.
import { fromJson } from "@bufbuild/protobuf";
import type { DescEnum, JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ProtocolVersionSchema, SessionEventSchema, StopReasonSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { LineDecodeResult } from "./message-codec.js";

type FieldKind = "string" | "bool" | "struct" | "value" | "uint64" | "double";

interface FastKind {
  /** A fresh message with every field at its default, in one fixed object shape (fast property access). */
  create: () => Record<string, unknown>;
  fields: Record<string, FieldKind>;
}

const FAST_KINDS: Record<string, FastKind> = {
  text: {
    create: () => ({ $typeName: "oz0.harness.v1.TextEvent", itemId: "", text: "", delta: false, role: "" }),
    fields: { itemId: "string", text: "string", delta: "bool", role: "string" },
  },
  toolCall: {
    create: () => ({ $typeName: "oz0.harness.v1.ToolCall", callId: "", tool: "", input: undefined, title: "" }),
    fields: { callId: "string", tool: "string", input: "struct", title: "string" },
  },
  toolResult: {
    create: () => ({ $typeName: "oz0.harness.v1.ToolResult", callId: "", output: undefined, isError: false }),
    fields: { callId: "string", output: "value", isError: "bool" },
  },
  permissionRequest: {
    create: () => ({
      $typeName: "oz0.harness.v1.PermissionRequest",
      id: "",
      tool: "",
      input: undefined,
      title: "",
      callId: "",
    }),
    fields: { id: "string", tool: "string", input: "struct", title: "string", callId: "string" },
  },
  runtimeToolCall: {
    create: () => ({ $typeName: "oz0.harness.v1.RuntimeToolCall", id: "", name: "", input: undefined }),
    fields: { id: "string", name: "string", input: "struct" },
  },
  usage: {
    create: () => ({
      $typeName: "oz0.harness.v1.Usage",
      model: "",
      inputTokens: 0n,
      outputTokens: 0n,
      cacheReadTokens: 0n,
      cacheWriteTokens: 0n,
      reasoningTokens: 0n,
      costUsd: 0,
    }),
    fields: {
      model: "string",
      inputTokens: "uint64",
      outputTokens: "uint64",
      cacheReadTokens: "uint64",
      cacheWriteTokens: "uint64",
      reasoningTokens: "uint64",
      costUsd: "double",
    },
  },
  heartbeat: { create: () => ({ $typeName: "oz0.harness.v1.Heartbeat" }), fields: {} },
};

/** RFC 3339 in UTC, the form every JSON encoder writes; other offsets take the slow path. */
const UTC_TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$/;
const UINT64_DIGITS = /^\d{1,19}$/;
const NOT_DONE = Symbol("fallback");

function fieldValue(kind: FieldKind, value: unknown): unknown {
  switch (kind) {
    case "string":
      return typeof value === "string" ? value : NOT_DONE;
    case "bool":
      return typeof value === "boolean" ? value : NOT_DONE;
    case "struct":
      return value !== null && typeof value === "object" && !Array.isArray(value) ? (value as JsonObject) : NOT_DONE;
    case "uint64":
      if (typeof value === "string" && UINT64_DIGITS.test(value)) return BigInt(value);
      return typeof value === "number" && Number.isSafeInteger(value) && value >= 0 ? BigInt(value) : NOT_DONE;
    case "double":
      return typeof value === "number" ? value : NOT_DONE;
    case "value":
      // null would mean "unset" for a message field; leave that subtlety to fromJson.
      return value === null ? NOT_DONE : jsonToValue(value as JsonValue);
  }
}

/** google.protobuf.Value from JSON, as protobuf-es represents it. */
function jsonToValue(json: JsonValue): unknown {
  let kind: { case: string; value: unknown };
  if (json === null) kind = { case: "nullValue", value: 0 };
  else if (typeof json === "number") kind = { case: "numberValue", value: json };
  else if (typeof json === "string") kind = { case: "stringValue", value: json };
  else if (typeof json === "boolean") kind = { case: "boolValue", value: json };
  else if (Array.isArray(json))
    kind = { case: "listValue", value: { $typeName: "google.protobuf.ListValue", values: json.map(jsonToValue) } };
  else {
    const fields: Record<string, unknown> = {};
    for (const key in json) fields[key] = jsonToValue(json[key] as JsonValue);
    kind = { case: "structValue", value: { $typeName: "google.protobuf.Struct", fields } };
  }
  return { $typeName: "google.protobuf.Value", kind };
}

function timestamp(value: unknown): unknown {
  if (typeof value !== "string") return NOT_DONE;
  const m = UTC_TIMESTAMP.exec(value);
  if (m === null) return NOT_DONE;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6]));
  if (Number.isNaN(ms)) return NOT_DONE;
  return {
    $typeName: "google.protobuf.Timestamp",
    seconds: BigInt(ms / 1000),
    nanos: Number((m[7] ?? "").padEnd(9, "0")),
  };
}

/** Builds the event directly when the JSON is a common kind in canonical form; undefined otherwise. */
function fastEvent(json: Record<string, unknown>): SessionEvent | undefined {
  let kind: string | undefined;
  let time: unknown;
  for (const key in json) {
    if (key === "time") {
      time = timestamp(json.time);
      if (time === NOT_DONE) return undefined;
    } else if (kind !== undefined) return undefined;
    else kind = key;
  }
  if (kind === undefined) return undefined;
  const spec = FAST_KINDS[kind];
  const body = json[kind];
  if (spec === undefined || body === null || typeof body !== "object" || Array.isArray(body)) return undefined;
  const value = spec.create();
  for (const field in body) {
    const fieldKind = spec.fields[field];
    if (fieldKind === undefined) return undefined;
    const decoded = fieldValue(fieldKind, (body as Record<string, unknown>)[field]);
    if (decoded === NOT_DONE) return undefined;
    value[field] = decoded;
  }
  const event: Record<string, unknown> = { $typeName: "oz0.harness.v1.SessionEvent", event: { case: kind, value } };
  if (time !== undefined) event.time = time;
  return event as unknown as SessionEvent;
}

/**
 * Parses one stdout line as a SessionEvent, ignoring unknown fields. Never
 * throws. An event with no kind this version knows decodes with
 * `event.case === undefined`.
 */
export function decodeEventLine(line: string): LineDecodeResult<typeof SessionEventSchema> {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch (error) {
    return { ok: false, reason: "invalid_json", detail: (error as Error).message };
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    return {
      ok: false,
      reason: "invalid_message",
      detail: `expected a JSON object, got ${json === null ? "null" : Array.isArray(json) ? "an array" : `a ${typeof json}`}`,
    };
  }
  const fast = fastEvent(json as Record<string, unknown>);
  if (fast !== undefined) return { ok: true, message: fast };
  const unknownName = unknownEnumName(json as Record<string, unknown>);
  if (unknownName !== undefined) return { ok: false, reason: "invalid_message", detail: unknownName };
  try {
    return { ok: true, message: fromJson(SessionEventSchema, json as JsonValue, { ignoreUnknownFields: true }) };
  } catch (error) {
    return { ok: false, reason: "invalid_message", detail: (error as Error).message };
  }
}

/**
 * The enums that decide a session, by event and field (both JSON spellings). fromJson, told to ignore what it
 * does not know, reads a name it does not know as the enum's zero: `"stopReason": "completed"` ended a session
 * "unspecified", and `"protocolVersion": "PROTOCOL_VERSION_2"` read as a harness of no version.
 */
const DECIDING_ENUMS: { event: string; fields: [string, string]; enum: DescEnum }[] = [
  { event: "result", fields: ["stopReason", "stop_reason"], enum: StopReasonSchema },
  { event: "started", fields: ["protocolVersion", "protocol_version"], enum: ProtocolVersionSchema },
];

/** What is wrong when a deciding enum is given by a name it does not have; undefined when nothing is. */
function unknownEnumName(json: Record<string, unknown>): string | undefined {
  for (const { event, fields, enum: desc } of DECIDING_ENUMS) {
    const value = json[event];
    if (value === null || typeof value !== "object") continue;
    for (const field of fields) {
      const given = (value as Record<string, unknown>)[field];
      if (typeof given !== "string" || desc.values.some((v) => v.name === given)) continue;
      const names = desc.values.filter((v) => v.number !== 0).map((v) => v.name);
      return `${event}.${field} ${JSON.stringify(given.slice(0, 64))} is not a ${desc.name} name; use one of ${names.join(", ")} (proto3 JSON names, upper case, or their numbers)`;
    }
  }
  return undefined;
}
