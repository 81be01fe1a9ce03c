// Validates custom resources against the openAPIV3Schema of CRDs kept in the
// repository (deploy/k8s/crds), the way the API server's structural schema
// does: types, required, enum, bounds, patterns, minItems, int-or-string,
// and unknown fields (pruned by the server, so reported here) except where
// x-kubernetes-preserve-unknown-fields says they are kept.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { parse } from "yaml";
import { k8sDir, type K8sObject } from "./render.js";

export interface JsonSchema {
  type?: "object" | "array" | "string" | "integer" | "number" | "boolean";
  properties?: Record<string, JsonSchema>;
  additionalProperties?: JsonSchema | boolean;
  items?: JsonSchema;
  required?: string[];
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  minItems?: number;
  pattern?: string;
  anyOf?: JsonSchema[];
  "x-kubernetes-preserve-unknown-fields"?: boolean;
  "x-kubernetes-int-or-string"?: boolean;
}

interface Crd {
  spec: {
    group: string;
    names: { kind: string };
    versions: Array<{ name: string; served: boolean; schema: { openAPIV3Schema: JsonSchema } }>;
  };
}

export const crdDir = path.join(k8sDir, "crds");

/** apiVersion|kind → schema, for every served version of every CRD kept. */
export function loadCrdSchemas(dir = crdDir): Map<string, JsonSchema> {
  const schemas = new Map<string, JsonSchema>();
  for (const file of readdirSync(dir).filter((f) => f.endsWith(".yaml"))) {
    const crd = parse(readFileSync(path.join(dir, file), "utf8")) as Crd;
    for (const version of crd.spec.versions) {
      if (!version.served) continue;
      schemas.set(`${crd.spec.group}/${version.name}|${crd.spec.names.kind}`, version.schema.openAPIV3Schema);
    }
  }
  return schemas;
}

function typeOf(value: unknown): string {
  if (Array.isArray(value)) return "array";
  if (value === null) return "null";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

export function validateAgainst(value: unknown, schema: JsonSchema, at = ""): string[] {
  const errors: string[] = [];
  const where = at || "(root)";
  if (schema["x-kubernetes-int-or-string"]) {
    if (typeof value !== "string" && !Number.isInteger(value)) errors.push(`${where}: must be an integer or a string`);
    if (typeof value === "string" && schema.pattern && !new RegExp(schema.pattern).test(value)) {
      errors.push(`${where}: "${value}" does not match ${schema.pattern}`);
    }
    return errors;
  }
  if (schema.anyOf && !schema.anyOf.some((s) => validateAgainst(value, s, at).length === 0)) {
    errors.push(`${where}: matches none of anyOf`);
  }
  const actual = typeOf(value);
  if (schema.type) {
    const ok = schema.type === actual || (schema.type === "number" && actual === "integer");
    if (!ok) {
      errors.push(`${where}: must be ${schema.type}, is ${actual}`);
      return errors;
    }
  }
  if (schema.enum && !schema.enum.includes(value))
    errors.push(`${where}: ${JSON.stringify(value)} is not one of ${JSON.stringify(schema.enum)}`);
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum)
      errors.push(`${where}: ${value} < minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum)
      errors.push(`${where}: ${value} > maximum ${schema.maximum}`);
  }
  if (typeof value === "string" && schema.pattern && !new RegExp(schema.pattern).test(value)) {
    errors.push(`${where}: "${value}" does not match ${schema.pattern}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems)
      errors.push(`${where}: fewer than ${schema.minItems} items`);
    if (schema.items) value.forEach((item, i) => errors.push(...validateAgainst(item, schema.items!, `${at}[${i}]`)));
  }
  if (actual === "object") {
    const object = value as Record<string, unknown>;
    for (const key of schema.required ?? []) {
      if (!(key in object)) errors.push(`${where}: missing required field "${key}"`);
    }
    for (const [key, child] of Object.entries(object)) {
      const childAt = `${at}.${key}`;
      const property = schema.properties?.[key];
      if (property) errors.push(...validateAgainst(child, property, childAt));
      else if (typeof schema.additionalProperties === "object")
        errors.push(...validateAgainst(child, schema.additionalProperties, childAt));
      else if (schema.additionalProperties === true || schema["x-kubernetes-preserve-unknown-fields"]) continue;
      else errors.push(`${childAt}: unknown field`);
    }
  }
  return errors;
}

/** Errors of a custom resource against the kept CRDs (metadata is checked elsewhere). */
export function validateCustomResource(object: K8sObject, schemas: Map<string, JsonSchema>): string[] {
  const schema = schemas.get(`${object.apiVersion}|${object.kind}`);
  if (!schema) return [`no CRD schema kept in deploy/k8s/crds for ${object.apiVersion} ${object.kind}`];
  // metadata is ObjectMeta for every kind; the API server checks it, not the
  // CRD schema (which only says `type: object`).
  const { metadata, ...rest } = object;
  if (typeof metadata !== "object" || metadata === null) return [".metadata: missing"];
  return validateAgainst(rest, schema);
}
