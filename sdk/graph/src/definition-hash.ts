/** Content hash of a definition: runs are pinned to it, so it must not depend on key order. */
import { createHash } from "node:crypto";
import type { GraphDefinition } from "./definition.js";

/** JSON with object keys sorted, so equal definitions serialise identically. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** `sha256:<hex>` of the canonical JSON of `definition`. */
export function definitionHash(definition: GraphDefinition): string {
  return `sha256:${createHash("sha256").update(canonicalJson(definition)).digest("hex")}`;
}
