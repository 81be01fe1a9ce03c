// Renders a kustomize directory to plain objects, with `kubectl kustomize`
// (kubectl bundles kustomize) or a standalone `kustomize` (which
// deploy/ci-prerequisites.sh installs with `go install` where kubectl is
// missing). No cluster is involved: both render offline.
//
// The dev overlays read credentials that overlays/dev/generate-secrets.sh
// makes at deploy time (gitignored, never committed). The tests render a
// temporary copy of deploy/k8s in which that script has run, so they need
// no step first and never write credentials into the checkout.
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";

export const deployDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const k8sDir = path.join(deployDir, "k8s");

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; [key: string]: unknown };
  [key: string]: unknown;
}

interface Renderer {
  describe: string;
  command: string;
  args: (dir: string) => string[];
}

function works(command: string, args: string[]): boolean {
  const result = spawnSync(command, args, { stdio: "ignore", timeout: 30_000 });
  return result.status === 0;
}

function goBin(): string[] {
  const dirs: string[] = [];
  if (process.env.GOBIN) dirs.push(process.env.GOBIN);
  const gopath = process.env.GOPATH ?? path.join(homedir(), "go");
  for (const p of gopath.split(path.delimiter)) dirs.push(path.join(p, "bin"));
  return dirs;
}

let cached: Renderer | undefined;

/** The renderer this machine has, or an error that says how to get one. */
export function renderer(): Renderer {
  if (cached) return cached;
  const explicit = process.env.OZ0_KUSTOMIZE;
  const kustomizes = [explicit, "kustomize", ...goBin().map((d) => path.join(d, "kustomize"))].filter(
    (c): c is string => typeof c === "string" && c.length > 0,
  );
  if (!explicit && works("kubectl", ["version", "--client"])) {
    cached = { describe: "kubectl kustomize", command: "kubectl", args: (dir) => ["kustomize", dir] };
    return cached;
  }
  for (const candidate of kustomizes) {
    if ((candidate.includes(path.sep) && !existsSync(candidate)) || !works(candidate, ["version"])) continue;
    cached = { describe: `${candidate} build`, command: candidate, args: (dir) => ["build", dir] };
    return cached;
  }
  throw new Error(
    "no kustomize renderer found: neither `kubectl` (which bundles kustomize) nor `kustomize` " +
      `(PATH, OZ0_KUSTOMIZE or ${goBin().join(", ")}) runs here. ` +
      "Run `bash deploy/ci-prerequisites.sh`, which installs sigs.k8s.io/kustomize/kustomize/v5 with `go install`.",
  );
}

/** Where the dev overlay's generator writes (gitignored). */
export const generatedDir = (k8sRoot: string): string => path.join(k8sRoot, "overlays", "dev", "generated");
export const generateSecretsScript = (k8sRoot: string): string =>
  path.join(k8sRoot, "overlays", "dev", "generate-secrets.sh");

/**
 * A copy of deploy/k8s without any generated credentials of the checkout,
 * with generate-secrets.sh run in it; removed when the process exits.
 */
export function preparedCopy(): string {
  const root = mkdtempSync(path.join(tmpdir(), "oz0-k8s-"));
  process.on("exit", () => rmSync(root, { recursive: true, force: true }));
  const copy = path.join(root, "k8s");
  cpSync(k8sDir, copy, { recursive: true, filter: (source) => path.resolve(source) !== generatedDir(k8sDir) });
  execFileSync("bash", [generateSecretsScript(copy)], { stdio: "pipe" });
  return copy;
}

let prepared: string | undefined;

/** `kustomize build` of a directory, parsed; a directory of deploy/k8s is rendered from the prepared copy. */
export function render(dir: string): K8sObject[] {
  const r = renderer();
  const relative = path.relative(k8sDir, path.resolve(dir));
  const inK8s = !relative.startsWith("..") && !path.isAbsolute(relative);
  const target = inK8s ? path.join((prepared ??= preparedCopy()), relative) : dir;
  const yamlText = execFileSync(r.command, r.args(target), { encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  const docs = parseAllDocuments(yamlText);
  const objects: K8sObject[] = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`${dir}: rendered YAML does not parse: ${doc.errors[0]?.message}`);
    const value = doc.toJS() as K8sObject | null;
    if (value) objects.push(value);
  }
  return objects;
}

/** Every overlay directory under deploy/k8s/overlays. */
export function overlayDirs(): string[] {
  const overlays = path.join(k8sDir, "overlays");
  return readdirSync(overlays, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(path.join(overlays, e.name, "kustomization.yaml")))
    .map((e) => path.join(overlays, e.name))
    .sort();
}

export function id(o: K8sObject): string {
  return `${o.kind}/${o.metadata?.name}`;
}
