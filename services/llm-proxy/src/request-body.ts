// A model call's request body as the proxy reads and rewrites it: parsed once
// (a body that is not a JSON object is refused before anything is metered),
// read a top-level field at a time by the wire format, and sent on as the
// client wrote it unless a field had to change.
import type { RequestBody } from "./wire-formats/wire-format.js";

export class JsonRequestBody implements RequestBody {
  readonly #raw: Buffer;
  readonly #parsed: Record<string, unknown>;

  private constructor(raw: Buffer, parsed: Record<string, unknown>) {
    this.#raw = raw;
    this.#parsed = parsed;
  }

  /** The body, or undefined when it is not a JSON object. */
  static parse(raw: Buffer): JsonRequestBody | undefined {
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw.toString("utf8"));
    } catch {
      return undefined;
    }
    return parsed !== null && typeof parsed === "object" && !Array.isArray(parsed) ? new JsonRequestBody(raw, parsed as Record<string, unknown>) : undefined;
  }

  field(name: string): unknown {
    return this.#parsed[name];
  }

  /** The bytes to send: the client's own, or with `changes` set (each field keeps its place, a new one goes last). */
  bytes(changes?: Readonly<Record<string, unknown>>): Buffer {
    if (!changes || Object.keys(changes).length === 0) return this.#raw;
    return Buffer.from(JSON.stringify({ ...this.#parsed, ...changes }));
  }
}
