// Read a YAML file and validate it against one of the published JSON Schemas
// (services/orchestrator/schemas/), so an invalid file is refused naming the
// file, the field (a JSON pointer) and what was expected.
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { LineCounter, parseDocument } from "yaml";
import { invalidArgument } from "../orchestrator-error.js";

export const schemaDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "schemas");

export type SchemaName = "plugin-manifest" | "agent" | "model-script";

// verbose: errors carry their schema, so a rule ajv words badly ("must NOT be valid") can be described by the schema itself.
const ajv = new Ajv({ allErrors: false, strict: false, useDefaults: false, verbose: true });
const compiled = new Map<SchemaName, ValidateFunction>();

function validator(name: SchemaName): ValidateFunction {
  let fn = compiled.get(name);
  if (!fn) {
    const schema = JSON.parse(readFileSync(path.join(schemaDir, `${name}.schema.json`), "utf8")) as object;
    fn = ajv.compile(schema);
    compiled.set(name, fn);
  }
  return fn;
}

/** The rule for the names agent.schema.json gives agents (and plugins, harnesses), in words. */
export const NAME_WORDS = "lower-case letters, digits and '-', starting with a letter, at most 64 characters";

/** Agent names' pattern in agent.schema.json, for names checked outside a schema (a graph's: one name space). */
export const NAME_PATTERN = /^[a-z][a-z0-9-]{0,63}$/;

/**
 * The schemas' patterns in words: a person fixing a name should not have to read a regular expression.
 * A pattern not here is shown as it is.
 */
const PATTERN_WORDS: Record<string, string> = {
  "^[a-z][a-z0-9-]{0,63}$": `a name of ${NAME_WORDS}`,
  "^harness:[a-z][a-z0-9-]{0,63}$": `harness:NAME, NAME being a harness's name (${NAME_WORDS})`,
  "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$": "a duration of hours, minutes and seconds, for example 90s, 10m or 1h30m",
  "^[a-z0-9-]+/.+$": "PROVIDER/MODEL: the provider in lower-case letters, digits and '-', a '/', then the model's name",
  "^(/.*)?$": "a JSON pointer: empty, or starting with '/' (for example /command)",
};

function patternWords(error: ErrorObject, pattern: string): string {
  const words = PATTERN_WORDS[pattern] ?? `a string matching ${pattern}`;
  // What was written, so the person sees which part breaks the rule (ajv's verbose errors carry it).
  return typeof error.data === "string" ? `${words}; got ${JSON.stringify(error.data)}` : words;
}

function describe(error: ErrorObject): { pointer: string; expected: string } {
  const base = error.instancePath || "";
  const p = error.params as Record<string, unknown>;
  switch (error.keyword) {
    case "required":
      return { pointer: `${base}/${String(p.missingProperty)}`, expected: "a value (the field is required)" };
    case "additionalProperties":
      return {
        pointer: `${base}/${String(p.additionalProperty)}`,
        expected: "no such field (unknown field; check its spelling)",
      };
    case "type":
      return { pointer: base || "/", expected: `a value of type ${String(p.type)}` };
    case "pattern":
      return { pointer: base || "/", expected: patternWords(error, String(p.pattern)) };
    case "minItems":
      return { pointer: base || "/", expected: `at least ${String(p.limit)} item${p.limit === 1 ? "" : "s"}` };
    case "enum":
      return {
        pointer: base || "/",
        expected: `one of ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(", ")}`,
      };
    case "not": {
      const described = (error.parentSchema as { description?: unknown } | undefined)?.description;
      return {
        pointer: base || "/",
        expected: typeof described === "string" ? described : `a value that ${error.message ?? "matches the schema"}`,
      };
    }
    default:
      return { pointer: base || "/", expected: `a value that ${error.message ?? "matches the schema"}` };
  }
}

/** Validate a parsed value; throws invalid_argument naming the file, the field and what was expected. */
export function validateDocument<T>(options: { schema: SchemaName; value: unknown; file: string }): T {
  const validate = validator(options.schema);
  if (!validate(options.value)) {
    const first = validate.errors?.[0];
    const { pointer, expected } = first ? describe(first) : { pointer: "/", expected: "a valid document" };
    throw invalidArgument(
      `${options.file}: field ${pointer}: expected ${expected} (schema ${options.schema}.schema.json)`,
    );
  }
  return options.value as T;
}

/** Parse a YAML file and validate it. `displayName` is what the error names (a path relative to the plugin). */
export function readYamlDocument<T>(options: { schema: SchemaName; file: string; displayName?: string }): T {
  const shown = options.displayName ?? options.file;
  let text: string;
  try {
    text = readFileSync(options.file, "utf8");
  } catch {
    throw invalidArgument(`${shown}: file not found; create it or fix the path that names it`);
  }
  // linePos is filled in only with prettyErrors, which also adds the source lines to the message; the line
  // counter gives where the error is without them, so the one-line message can say line:column.
  const lines = new LineCounter();
  const doc = parseDocument(text, { prettyErrors: false, lineCounter: lines });
  if (doc.errors.length > 0) {
    const err = doc.errors[0]!;
    const line = err.linePos?.[0] ?? lines.linePos(err.pos[0]);
    throw invalidArgument(
      `${shown}${line ? `:${line.line}:${line.col}` : ""}: invalid YAML: ${err.message.split("\n")[0]}`,
    );
  }
  return validateDocument<T>({ schema: options.schema, value: doc.toJS(), file: shown });
}
