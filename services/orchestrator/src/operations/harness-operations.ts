// Harness operations (issue 10): the definition an agent version declares in
// `harness_operations`, the limits publication enforces, and the runtime tool
// each operation is offered to the parent's model as. Validation happens at
// publication so a version that exists is always one the runtime can serve;
// every message names the operation and the rule it broke.
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
// A CommonJS module: its default import is module.exports, whose `default` is the plugin.
import ajvFormats from "ajv-formats";
import { fullFormats } from "ajv-formats/dist/formats.js";
import { RE2 } from "re2-wasm";
import { invalidArgument } from "../orchestrator-error.js";

export const OPERATION_LIMITS = {
  maxOperations: 32,
  keyMaxChars: 64,
  descriptionMaxChars: 2_000,
  instructionsMaxChars: 100_000,
  timeoutMinMs: 1_000,
  timeoutMaxMs: 300_000,
  resultSchemaMaxBytes: 65_536,
  taskMaxChars: 100_000,
} as const;

export const OPERATION_KEY_PATTERN = /^[a-z][a-z0-9_-]*$/;

/** One operation as the agent YAML declares it (snake_case, like the rest of the file). */
export interface HarnessOperationDefinition {
  key: string;
  description: string;
  instructions: string;
  result_schema: Record<string, unknown>;
  timeout_ms: number;
}

/**
 * The JSON Schema keywords a result schema may use: enough for typed objects,
 * arrays, enums and bounds, and nothing that reaches outside the document
 * ($ref, $id) or makes validation errors hard to feed back to a model
 * (conditionals, dependencies). Harness structured output supports the same.
 */
export const SUPPORTED_SCHEMA_KEYWORDS: readonly string[] = [
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "enum",
  "const",
  "title",
  "description",
  "default",
  "examples",
  "minLength",
  "maxLength",
  "pattern",
  "format",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "multipleOf",
  "minItems",
  "maxItems",
  "uniqueItems",
  "minProperties",
  "maxProperties",
  "anyOf",
  "nullable",
];

// Keywords whose value is a schema, a list of schemas or a map of schemas.
const SUBSCHEMA = new Set(["items", "additionalProperties"]);
const SUBSCHEMA_LIST = new Set(["anyOf"]);
const SUBSCHEMA_MAP = new Set(["properties"]);

// `format` is checked, with ajv-formats' full set: a result that breaks the format its schema declares is
// invalid, as the README promises. A format outside the set is refused when the agent is published.
// strictNumbers again after `strict: false` (which turns it off): a typed number must be finite.
// `pattern` is matched with RE2, in time linear in the string: results are validated in the orchestrator's
// process, so a backtracking pattern such as ^(a+)+$ and a model's 40-character answer blocked its event loop
// for hours, every job with it (attacker review). RE2 has no lookaround or backreferences; publication refuses them.
const re2 = Object.assign((pattern: string, flags: string) => new RE2(pattern, flags), { code: "new RE2" });
const ajv = new Ajv({
  allErrors: true,
  strict: false,
  strictNumbers: true,
  useDefaults: false,
  code: { regExp: re2 },
});
ajvFormats.default(ajv);
const FORMATS: readonly string[] = Object.keys(fullFormats);

function chars(text: string): number {
  return [...text].length;
}

function refuse(where: string, rule: string): never {
  throw invalidArgument(`${where}: ${rule}`);
}

/** Walks a result schema, refusing keywords outside the supported subset (the pointer says where). */
function checkSubset(schema: unknown, pointer: string, where: string): void {
  if (typeof schema === "boolean") return;
  if (schema === null || typeof schema !== "object" || Array.isArray(schema)) {
    refuse(where, `result_schema${pointer || ""} must be a JSON Schema object`);
  }
  for (const [keyword, value] of Object.entries(schema as Record<string, unknown>)) {
    if (!SUPPORTED_SCHEMA_KEYWORDS.includes(keyword)) {
      refuse(
        where,
        `result_schema${pointer}/${keyword} uses a keyword outside the supported subset (${SUPPORTED_SCHEMA_KEYWORDS.join(", ")}); inline the schema without it`,
      );
    }
    if (keyword === "format" && (typeof value !== "string" || !FORMATS.includes(value))) {
      refuse(
        where,
        `result_schema${pointer}/format is ${JSON.stringify(value)}, not a format the orchestrator checks (${FORMATS.join(", ")}); use one of those, or a pattern`,
      );
    }
    if (keyword === "pattern" && typeof value === "string") {
      try {
        re2(value, "u");
      } catch (error) {
        refuse(
          where,
          `result_schema${pointer}/pattern ${JSON.stringify(value)} is not a pattern RE2 can match (${(error as Error).message}): patterns are matched in linear time, without lookaround or backreferences; rewrite it without them`,
        );
      }
    }
    if (SUBSCHEMA.has(keyword)) checkSubset(value, `${pointer}/${keyword}`, where);
    if (SUBSCHEMA_LIST.has(keyword) && Array.isArray(value))
      value.forEach((s, i) => checkSubset(s, `${pointer}/${keyword}/${i}`, where));
    if (SUBSCHEMA_MAP.has(keyword) && value && typeof value === "object") {
      for (const [name, s] of Object.entries(value as Record<string, unknown>))
        checkSubset(s, `${pointer}/${keyword}/${name}`, where);
    }
  }
}

/** Compiles a result schema; throws invalid_argument naming the operation when ajv refuses it. */
export function compileResultSchema(schema: Record<string, unknown>, where = "result_schema"): ValidateFunction {
  try {
    return ajv.compile(schema);
  } catch (error) {
    refuse(where, `result_schema does not compile as a JSON Schema (${(error as Error).message}); fix the schema`);
  }
}

/**
 * Checks an agent's `harness_operations` against every publication limit.
 * `toolNamespace` is every other tool name the agent's sessions see (the
 * harness's tools and other runtime tools), which operation keys must not reuse.
 * `file` prefixes messages (the agent YAML, relative to the plugin).
 */
export function validateHarnessOperations(options: {
  operations: unknown;
  toolNamespace: readonly string[];
  file: string;
}): HarnessOperationDefinition[] {
  const { file } = options;
  if (options.operations === undefined) return [];
  if (!Array.isArray(options.operations)) refuse(`${file}: field /harness_operations`, "expected a list of operations");
  const list = options.operations as unknown[];
  if (list.length > OPERATION_LIMITS.maxOperations) {
    refuse(
      `${file}: field /harness_operations`,
      `declares ${list.length} operations; at most ${OPERATION_LIMITS.maxOperations} are allowed per agent version`,
    );
  }
  const taken = new Set(options.toolNamespace);
  const keys = new Set<string>();
  return list.map((raw, index) => {
    const at = `${file}: field /harness_operations/${index}`;
    if (raw === null || typeof raw !== "object" || Array.isArray(raw))
      refuse(at, "expected an operation object with key, description, instructions, result_schema and timeout_ms");
    const op = raw as Record<string, unknown>;
    const known = ["key", "description", "instructions", "result_schema", "timeout_ms"];
    for (const field of Object.keys(op)) {
      if (!known.includes(field))
        refuse(
          at,
          `unknown field "${field}" (an operation has ${known.join(", ")}; an operation cannot attach or scope a skill or choose its own model)`,
        );
    }
    if (typeof op.key !== "string")
      refuse(at, "key is required: a string of 1–64 characters matching ^[a-z][a-z0-9_-]*$");
    const key = op.key;
    const where = `${at} (operation "${key}")`;
    if (chars(key) < 1 || chars(key) > OPERATION_LIMITS.keyMaxChars)
      refuse(where, `key must be 1–${OPERATION_LIMITS.keyMaxChars} characters (it has ${chars(key)})`);
    if (!OPERATION_KEY_PATTERN.test(key))
      refuse(
        where,
        "key must match ^[a-z][a-z0-9_-]*$ (lower-case letter first, then lower-case letters, digits, _ or -)",
      );
    if (keys.has(key))
      refuse(where, "key is declared twice; operation keys must be unique across the agent's tool namespace");
    if (taken.has(key))
      refuse(
        where,
        `key collides with the tool "${key}" the agent's sessions already have; keys must be unique across the whole tool namespace, so rename the operation`,
      );
    keys.add(key);
    const text = (field: "description" | "instructions", max: number): string => {
      const value = op[field];
      if (typeof value !== "string")
        refuse(where, `${field} is required: a string of 1–${max.toLocaleString("en")} characters`);
      const n = chars(value);
      if (n < 1 || n > max)
        refuse(where, `${field} must be 1–${max.toLocaleString("en")} characters (it has ${n.toLocaleString("en")})`);
      return value;
    };
    const description = text("description", OPERATION_LIMITS.descriptionMaxChars);
    const instructions = text("instructions", OPERATION_LIMITS.instructionsMaxChars);
    const timeout = op.timeout_ms;
    if (
      typeof timeout !== "number" ||
      !Number.isInteger(timeout) ||
      timeout < OPERATION_LIMITS.timeoutMinMs ||
      timeout > OPERATION_LIMITS.timeoutMaxMs
    ) {
      refuse(
        where,
        `timeout_ms must be a whole number of milliseconds from ${OPERATION_LIMITS.timeoutMinMs.toLocaleString("en")} to ${OPERATION_LIMITS.timeoutMaxMs.toLocaleString("en")} (got ${JSON.stringify(timeout)})`,
      );
    }
    const schema = op.result_schema;
    if (schema === undefined)
      refuse(where, "result_schema is required: a JSON Schema whose top level is an object schema");
    if (
      schema === null ||
      typeof schema !== "object" ||
      Array.isArray(schema) ||
      (schema as Record<string, unknown>).type !== "object"
    ) {
      refuse(where, 'result_schema must be a top-level object schema ({"type": "object", ...})');
    }
    const size = Buffer.byteLength(JSON.stringify(schema), "utf8");
    if (size > OPERATION_LIMITS.resultSchemaMaxBytes) {
      refuse(
        where,
        `result_schema serialises to ${size.toLocaleString("en")} bytes; at most ${OPERATION_LIMITS.resultSchemaMaxBytes.toLocaleString("en")} are allowed`,
      );
    }
    checkSubset(schema, "", where);
    compileResultSchema(schema as Record<string, unknown>, where);
    return { key, description, instructions, result_schema: schema as Record<string, unknown>, timeout_ms: timeout };
  });
}

/** The input every operation tool takes. */
export const OPERATION_INPUT_SCHEMA = {
  type: "object",
  properties: {
    task: {
      type: "string",
      minLength: 1,
      maxLength: OPERATION_LIMITS.taskMaxChars,
      description: "What this invocation should do, with any facts it needs.",
    },
  },
  required: ["task"],
  additionalProperties: false,
} as const;

/** Checks a call's input; returns the task or a message for the model saying what to fix. */
export function readOperationTask(input: unknown): { task: string } | { error: string } {
  const task =
    input && typeof input === "object" && !Array.isArray(input) ? (input as Record<string, unknown>).task : undefined;
  const extra = input && typeof input === "object" ? Object.keys(input).filter((k) => k !== "task") : [];
  if (typeof task !== "string") return { error: 'invalid input: expected {"task": "<what to do>"} with task a string' };
  if (extra.length > 0)
    return { error: `invalid input: unknown field(s) ${extra.join(", ")}; pass only {"task": "..."}` };
  const n = chars(task);
  if (n < 1 || n > OPERATION_LIMITS.taskMaxChars)
    return {
      error: `invalid input: task must be 1–${OPERATION_LIMITS.taskMaxChars.toLocaleString("en")} characters (it has ${n.toLocaleString("en")})`,
    };
  return { task };
}

/**
 * Where `value` holds a number JSON cannot write (Infinity or NaN: a harness's
 * line may say 1e400), as a JSON pointer; undefined when it holds none. Such a
 * result could pass an untyped part of its schema and then not be sent to the
 * parent, nor read back from its checkpoint as what was validated.
 */
export function nonFiniteNumberAt(value: unknown, pointer = ""): string | undefined {
  if (typeof value === "number") return Number.isFinite(value) ? undefined : pointer || "/";
  if (value === null || typeof value !== "object") return undefined;
  for (const [key, item] of Object.entries(value)) {
    const found = nonFiniteNumberAt(item, `${pointer}/${key.replaceAll("~", "~0").replaceAll("/", "~1")}`);
    if (found !== undefined) return found;
  }
  return undefined;
}

/** The validator's errors, as lines a model can act on. */
export function describeValidationErrors(errors: readonly ErrorObject[] | null | undefined): string[] {
  return (errors ?? [])
    .slice(0, 20)
    .map(
      (e) =>
        `${e.instancePath || "/"} ${e.message ?? "is invalid"}${e.keyword === "additionalProperties" ? ` (${String((e.params as { additionalProperty?: string }).additionalProperty)})` : ""}`,
    );
}
