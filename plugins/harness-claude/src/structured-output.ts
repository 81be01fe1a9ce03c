// The result's structured output when the model answered the output schema in
// plain text instead of calling Claude Code's StructuredOutput tool.
import type { JsonObject } from "@bufbuild/protobuf";
import { z } from "zod";

export type StructuredOutcome = { ok: true; value: JsonObject } | { ok: false; error: string };

/** The JSON object in `text` (bare or in a ```json fence), checked against `schema`. */
export function structuredOutputFromText(text: string, schema: JsonObject): StructuredOutcome {
  const fenced = /```(?:json)?\s*\n([\s\S]*?)\n?```/.exec(text);
  const candidate = (fenced?.[1] ?? text).trim();
  let value: unknown;
  try {
    value = JSON.parse(candidate);
  } catch {
    return {
      ok: false,
      error:
        "the request has an output_schema but the model's final answer is not JSON and it did not call StructuredOutput",
    };
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    return { ok: false, error: "the request has an output_schema but the model's final answer is not a JSON object" };
  }
  let validator: z.ZodType;
  try {
    validator = z.fromJSONSchema(schema as Parameters<typeof z.fromJSONSchema>[0]);
  } catch (error) {
    return { ok: false, error: `the output_schema cannot be checked: ${(error as Error).message}` };
  }
  const checked = validator.safeParse(value);
  if (!checked.success) {
    const first = checked.error.issues[0];
    return {
      ok: false,
      error: `the model's final answer does not match the output_schema: ${first ? `${first.path.join(".") || "(root)"}: ${first.message}` : "invalid"}`,
    };
  }
  return { ok: true, value: value as JsonObject };
}
