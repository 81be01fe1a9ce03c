// Offline validation of Kubernetes objects:
//  1. the kubernetes-models validators (types, required fields, enums,
//     formats: the JSON schemas generated from Kubernetes' OpenAPI);
//  2. an unknown-field check those validators do not make (a misspelt
//     `readOnlyRootFileSystem` passes them, and the API server would prune
//     it silently): every key of the object is looked up in the property
//     list of the same model's TypeScript declaration, which is generated
//     from the same OpenAPI schema, walked with the TypeScript checker.
import path from "node:path";
import ts from "typescript";
import { deployDir, type K8sObject } from "./render.js";

/** kubernetes-models module path for an apiVersion and kind. */
export function modelModule(apiVersion: string, kind: string): string {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  return `kubernetes-models/${group ? `${group}/` : ""}${version}/${kind}`;
}

export function hasModel(apiVersion: string, kind: string): boolean {
  try {
    import.meta.resolve(modelModule(apiVersion, kind));
    return true;
  } catch {
    return false;
  }
}

/** Runs the kubernetes-models validator; returns its error messages. */
export async function validateWithModel(object: K8sObject): Promise<string[]> {
  const mod = (await import(modelModule(object.apiVersion, object.kind))) as Record<
    string,
    new (data: unknown) => { validate(): void }
  >;
  const Model = mod[object.kind];
  if (!Model) return [`kubernetes-models has no ${object.kind} in ${modelModule(object.apiVersion, object.kind)}`];
  try {
    new Model(object).validate();
    return [];
  } catch (error) {
    return [String((error as Error).message ?? error)];
  }
}

// ---- unknown fields, through the models' TypeScript declarations ----

const virtualFile = path.join(deployDir, "test", "support", "__models__.ts");
let checker: ts.TypeChecker | undefined;
const typeCache = new Map<string, ts.Type>();

interface TypeRef {
  module: string;
  name: string;
}
const key = (t: TypeRef): string => `${t.module}#${t.name}`;
const modelType = (apiVersion: string, kind: string): TypeRef => ({
  module: modelModule(apiVersion, kind),
  name: `I${kind}`,
});
/** ObjectMeta, for the metadata of custom resources. */
export const objectMeta: TypeRef = {
  module: "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta",
  name: "IObjectMeta",
};
// Kinds the manifests use, loaded in the first program so it is built once.
const preload: TypeRef[] = [
  objectMeta,
  ...[
    ["v1", "Namespace"],
    ["v1", "ServiceAccount"],
    ["v1", "ConfigMap"],
    ["v1", "Secret"],
    ["v1", "Service"],
    ["apps/v1", "Deployment"],
    ["apps/v1", "StatefulSet"],
    ["policy/v1", "PodDisruptionBudget"],
    ["networking.k8s.io/v1", "NetworkPolicy"],
    ["autoscaling/v2", "HorizontalPodAutoscaler"],
    ["node.k8s.io/v1", "RuntimeClass"],
    ["v1", "PersistentVolumeClaim"],
  ].map(([v, k]) => modelType(v!, k!)),
];

/** Builds one program that declares a type alias per declaration asked for. */
function loadTypes(refs: TypeRef[]): void {
  const wanted = refs.filter((r) => !typeCache.has(key(r)));
  if (wanted.length === 0) return;
  const known = new Map<string, TypeRef>();
  for (const r of [...preload, ...typeRefs.values(), ...wanted]) known.set(key(r), r);
  const all = [...known.values()];
  const source = all
    .map((r, i) => `import type { ${r.name} as M${i} } from "${r.module}";\nexport type T${i} = M${i};`)
    .join("\n");
  const options: ts.CompilerOptions = {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    noEmit: true,
    skipLibCheck: true,
    types: [],
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (fileName, languageVersion, ...rest) =>
    path.resolve(fileName) === virtualFile
      ? ts.createSourceFile(fileName, source, languageVersion)
      : getSourceFile(fileName, languageVersion, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (fileName) => path.resolve(fileName) === virtualFile || fileExists(fileName);
  const program = ts.createProgram([virtualFile], options, host);
  checker = program.getTypeChecker();
  const sf = program.getSourceFile(virtualFile);
  if (!sf) throw new Error("could not load the kubernetes-models declarations");
  const moduleSymbol = checker.getSymbolAtLocation(sf);
  const exports = moduleSymbol ? checker.getExportsOfModule(moduleSymbol) : [];
  typeCache.clear();
  all.forEach((r, i) => {
    const symbol = exports.find((s) => s.name === `T${i}`);
    if (!symbol) throw new Error(`no declaration for ${key(r)}`);
    const type = checker!.getDeclaredTypeOfSymbol(symbol);
    if (type.flags & ts.TypeFlags.Any) throw new Error(`the declaration ${r.name} in ${r.module} did not resolve`);
    typeCache.set(key(r), type);
    typeRefs.set(key(r), r);
  });
}
const typeRefs = new Map<string, TypeRef>();

function nonNullable(type: ts.Type): ts.Type[] {
  const parts = type.isUnion() ? type.types : [type];
  return parts.filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)));
}

function walk(value: unknown, type: ts.Type, at: string, errors: string[]): void {
  const c = checker!;
  if (value === null || typeof value !== "object") return; // scalars: the validators check them
  const candidates = nonNullable(type);
  if (candidates.some((t) => t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown))) return;
  if (Array.isArray(value)) {
    const arrayType = candidates.find((t) => c.isArrayType(t));
    if (!arrayType) return; // the validators report the type mismatch
    const element = c.getTypeArguments(arrayType as ts.TypeReference)[0];
    if (element) value.forEach((item, i) => walk(item, element, `${at}[${i}]`, errors));
    return;
  }
  const objectType = candidates.find((t) => t.flags & ts.TypeFlags.Object && !c.isArrayType(t));
  if (!objectType) return;
  const index = c.getIndexInfoOfType(objectType, ts.IndexKind.String);
  for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
    const property = objectType.getProperty(key);
    if (property) {
      walk(child, c.getTypeOfSymbol(property), `${at}.${key}`, errors);
    } else if (index) {
      walk(child, index.type, `${at}.${key}`, errors);
    } else {
      errors.push(`${at}.${key}: unknown field (not in the schema of ${c.typeToString(objectType)})`);
    }
  }
}

/** Unknown fields anywhere in the objects (all loaded in one program). */
export function unknownFields(objects: K8sObject[]): Map<K8sObject, string[]> {
  loadTypes(objects.map((o) => modelType(o.apiVersion, o.kind)));
  const result = new Map<K8sObject, string[]>();
  for (const object of objects) {
    const errors: string[] = [];
    walk(object, typeCache.get(key(modelType(object.apiVersion, object.kind)))!, "", errors);
    result.set(object, errors);
  }
  return result;
}

/** Unknown fields of a value checked against one declaration (e.g. objectMeta). */
export function unknownFieldsAs(value: unknown, type: TypeRef, at = ""): string[] {
  loadTypes([type]);
  const errors: string[] = [];
  walk(value, typeCache.get(key(type))!, at, errors);
  return errors;
}
