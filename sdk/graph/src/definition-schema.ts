/**
 * The published JSON Schema of a graph definition, and the YAML/JSON readers
 * that check documents against it (structure only; `validateDefinition` checks
 * meaning: loops, arms, agents, cycles).
 */
import { Ajv, type ErrorObject } from "ajv";
import { parse as parseYamlText, stringify as stringifyYaml } from "yaml";
import { GRAPH_DEFINITION_FORMAT, type GraphDefinition } from "./definition.js";
import { GraphValidationError, type DefinitionProblem } from "./errors.js";

const nodeId = { type: "string", minLength: 1 } as const;
const name = { type: "string", minLength: 1 } as const;

/** JSON Schema (draft-07) for {@link GraphDefinition}, the YAML and JSON form alike. */
export const graphDefinitionSchema = {
  $schema: "http://json-schema.org/draft-07/schema#",
  $id: "https://oz0.dev/schemas/graph-definition.v1.json",
  title: "Orchestrator Zero graph harness definition",
  type: "object",
  required: ["format", "kind", "name", "id", "root"],
  additionalProperties: false,
  properties: {
    format: { const: GRAPH_DEFINITION_FORMAT },
    kind: { enum: ["harness", "graph"] },
    name,
    id: nodeId,
    version: { type: "string" },
    managerAgent: name,
    secretKeys: { type: "array", items: name, uniqueItems: true },
    triggers: {
      type: "array",
      items: { type: "object", required: ["type"], properties: { type: { type: "string" } } },
    },
    root: { $ref: "#/definitions/flow" },
    graphs: { type: "object", additionalProperties: { $ref: "#/definitions/flow" } },
  },
  definitions: {
    flow: { type: "array", items: { $ref: "#/definitions/node" } },
    node: {
      type: "object",
      required: ["kind"],
      properties: { kind: { enum: ["agent", "step", "parallel", "choice", "loop", "graph"] } },
      allOf: [
        { if: { properties: { kind: { const: "agent" } } }, then: { $ref: "#/definitions/agent" } },
        { if: { properties: { kind: { const: "step" } } }, then: { $ref: "#/definitions/step" } },
        { if: { properties: { kind: { const: "parallel" } } }, then: { $ref: "#/definitions/parallel" } },
        { if: { properties: { kind: { const: "choice" } } }, then: { $ref: "#/definitions/choice" } },
        { if: { properties: { kind: { const: "loop" } } }, then: { $ref: "#/definitions/loop" } },
        { if: { properties: { kind: { const: "graph" } } }, then: { $ref: "#/definitions/graphRef" } },
      ],
    },
    agent: {
      type: "object",
      required: ["kind", "id", "agent"],
      additionalProperties: false,
      properties: { kind: { const: "agent" }, id: nodeId, agent: name },
    },
    step: {
      type: "object",
      required: ["kind", "id", "step"],
      additionalProperties: false,
      properties: {
        kind: { const: "step" },
        id: nodeId,
        step: name,
        module: { type: "string", minLength: 1 },
        export: { type: "string", minLength: 1 },
        // An agent's limits.timeout's form: 90s, 10m, 1h30m.
        timeout: { type: "string", pattern: "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$", minLength: 2 },
      },
    },
    parallel: {
      type: "object",
      required: ["kind", "id", "branches"],
      additionalProperties: false,
      properties: {
        kind: { const: "parallel" },
        id: nodeId,
        branches: { type: "array", minItems: 1, items: { $ref: "#/definitions/flow" } },
        failFast: { type: "boolean" },
      },
    },
    choice: {
      type: "object",
      required: ["kind", "id", "key", "arms"],
      additionalProperties: false,
      properties: {
        kind: { const: "choice" },
        id: nodeId,
        evaluator: {
          type: "object",
          required: ["kind"],
          properties: { kind: { enum: ["agent", "step"] } },
          allOf: [
            { if: { properties: { kind: { const: "agent" } } }, then: { $ref: "#/definitions/agent" } },
            { if: { properties: { kind: { const: "step" } } }, then: { $ref: "#/definitions/step" } },
          ],
        },
        key: { type: "string", minLength: 1 },
        arms: {
          type: "array",
          items: {
            type: "object",
            required: ["label", "flow"],
            additionalProperties: false,
            properties: { label: { type: "string" }, flow: { $ref: "#/definitions/flow" } },
          },
        },
        otherwise: { $ref: "#/definitions/flow" },
      },
    },
    loop: {
      type: "object",
      required: ["kind", "id", "body"],
      additionalProperties: false,
      properties: {
        kind: { const: "loop" },
        id: nodeId,
        body: { $ref: "#/definitions/flow" },
        until: { $ref: "#/definitions/flow" },
        maxIterations: { type: "integer" },
      },
    },
    graphRef: {
      type: "object",
      required: ["kind", "id", "graph"],
      additionalProperties: false,
      properties: { kind: { const: "graph" }, id: nodeId, graph: name },
    },
  },
} as const;

const ajv = new Ajv({ allErrors: true, strict: false });
const check = ajv.compile(graphDefinitionSchema);

function problemOf(e: ErrorObject): DefinitionProblem {
  const field = e.instancePath || "/";
  let message = e.message ?? "is invalid";
  if (e.keyword === "additionalProperties") {
    message = `has unknown field "${String((e.params as { additionalProperty: string }).additionalProperty)}"; remove it`;
  } else if (e.keyword === "required") {
    message = `is missing required field "${String((e.params as { missingProperty: string }).missingProperty)}"`;
  } else if (e.keyword === "const" || e.keyword === "enum") {
    message = `${message}: ${JSON.stringify((e.params as { allowedValue?: unknown; allowedValues?: unknown }).allowedValue ?? (e.params as { allowedValues?: unknown }).allowedValues)}`;
  }
  return { code: "SCHEMA", path: field, message };
}

/**
 * How deep a definition may nest mappings and lists (the document itself is the first level; a parallel, choice
 * or loop inside another adds three). Readers and checkers walk a definition recursively: far deeper, the YAML
 * parser and the schema checker ran out of stack ("Maximum call stack size exceeded"), which said nothing of why.
 */
export const MAX_DEFINITION_DEPTH = 100;

function tooDeep(path: string): GraphValidationError {
  return new GraphValidationError([
    {
      code: "DEFINITION_TOO_DEEP",
      path,
      message: `is nested more than ${MAX_DEFINITION_DEPTH} levels deep; a definition may nest at most ${MAX_DEFINITION_DEPTH} levels of mappings and lists (a parallel, choice or loop inside another takes three), so put fewer of them inside each other`,
    },
  ]);
}

/** Where `value` first nests deeper than {@link MAX_DEFINITION_DEPTH}, walked without recursion; undefined if nowhere. */
function tooDeepAt(value: unknown): string | undefined {
  const stack: { value: unknown; path: string; depth: number }[] = [{ value, path: "", depth: 1 }];
  while (stack.length > 0) {
    const { value: v, path, depth } = stack.pop() as { value: unknown; path: string; depth: number };
    if (typeof v !== "object" || v === null) continue;
    if (depth > MAX_DEFINITION_DEPTH) return path || "/";
    for (const [key, child] of Object.entries(v)) {
      stack.push({ value: child, path: `${path}/${key.replace(/~/g, "~0").replace(/\//g, "~1")}`, depth: depth + 1 });
    }
  }
  return undefined;
}

/**
 * Checks `value` against {@link graphDefinitionSchema} and returns it typed.
 * @throws GraphValidationError naming each offending field.
 */
export function parseDefinition(value: unknown): GraphDefinition {
  const deep = tooDeepAt(value);
  if (deep !== undefined) throw tooDeep(deep);
  if (!check(value)) {
    // `if/then` wrappers add noise ("must match then schema") on top of the real finding.
    const errors = (check.errors ?? []).filter((e) => e.keyword !== "if");
    throw new GraphValidationError(errors.map(problemOf));
  }
  return value as GraphDefinition;
}

/**
 * Parses the YAML (or JSON, a subset of YAML) form of a definition.
 * @throws GraphValidationError on a syntax error or a schema mismatch.
 */
export function parseDefinitionYaml(text: string): GraphDefinition {
  let doc: unknown;
  try {
    doc = parseYamlText(text);
  } catch (e) {
    // The parser recurses per level: a document this deep is far past the limit parseDefinition names.
    if (e instanceof RangeError || /Maximum call stack size exceeded/.test((e as Error).message)) throw tooDeep("/");
    throw new GraphValidationError([
      { code: "YAML_SYNTAX", path: "/", message: `is not valid YAML (${(e as Error).message}); fix the syntax` },
    ]);
  }
  return parseDefinition(doc);
}

/** The YAML form of a definition; `parseDefinitionYaml` reads it back to an equal object. */
export function definitionToYaml(definition: GraphDefinition): string {
  return stringifyYaml(definition);
}
