// Decoding and encoding of protocol lines: proto3 JSON, one message per line,
// unknown fields ignored (protocol rule 2).
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";
import { fromJson, toJsonString } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";

/** Why a line could not be decoded. */
export type LineDecodeFailure = "invalid_json" | "invalid_message";

/** The result of {@link decodeLine}. */
export type LineDecodeResult<Desc extends DescMessage> =
  { ok: true; message: MessageShape<Desc> } | { ok: false; reason: LineDecodeFailure; detail: string };

/**
 * Parses one line as the proto3 JSON form of `schema`, ignoring unknown
 * fields. Never throws: a bad line is a value the caller reports.
 */
export function decodeLine<Desc extends DescMessage>(schema: Desc, line: string): LineDecodeResult<Desc> {
  let json: unknown;
  try {
    json = JSON.parse(line);
  } catch (error) {
    return { ok: false, reason: "invalid_json", detail: (error as Error).message };
  }
  if (json === null || typeof json !== "object" || Array.isArray(json)) {
    return { ok: false, reason: "invalid_message", detail: `expected a JSON object, got ${describeJson(json)}` };
  }
  try {
    return { ok: true, message: fromJson(schema, json as JsonValue, { ignoreUnknownFields: true }) };
  } catch (error) {
    return { ok: false, reason: "invalid_message", detail: (error as Error).message };
  }
}

/** The proto3 JSON line of `message`, newline included. */
export function encodeLine<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return toJsonString(schema, message) + "\n";
}

/** A short, secret-free description of a line for error messages: its length and start. */
export function describeLine(line: string): string {
  const head = line.length > 60 ? `${line.slice(0, 60)}…` : line;
  return `${JSON.stringify(head)} (${Buffer.byteLength(line)} bytes)`;
}

function describeJson(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return `a ${typeof value}`;
}
