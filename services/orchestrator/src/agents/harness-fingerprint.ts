// What a harness command runs, hashed, so that an agent version changes when
// its harness does (README "Plugins and agents", "What a version's harness
// hash covers"): the command's own files, the plugin's dependency manifests
// and lockfiles, and the rest of the plugin's files. Each part is kept apart
// so that an install can say why it published a new version.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import path from "node:path";
import { resolveHarnessCommand } from "./harness-command.js";
import type { ResolvedHarness } from "../store/job-store.js";

/**
 * Files outside the plugin's copy larger than this are hashed by size and
 * modification time instead of content, so an install stays fast; files
 * inside the copy are always hashed by content (the copy's times are those
 * of the copying, not of the source).
 */
export const MAX_HASHED_FILE_BYTES = 64 * 1024 * 1024;

/** Files at the plugin's root that pin its dependencies. */
export const DEPENDENCY_FILES = [
  "package.json",
  "package-lock.json",
  "npm-shrinkwrap.json",
  "yarn.lock",
  "pnpm-lock.yaml",
  "requirements.txt",
  "poetry.lock",
  "uv.lock",
  "go.mod",
  "go.sum",
  "Cargo.lock",
];

/** npm's record of what a node_modules folder holds; read through the copy's node_modules link. */
const INSTALLED_DEPENDENCIES = path.join("node_modules", ".package-lock.json");

export interface HarnessFingerprint {
  /** Per command argument that names a file (as written in the manifest): a hash of what it names. */
  command: Record<string, string>;
  /** Per dependency file of the plugin (DEPENDENCY_FILES, and node_modules/.package-lock.json): its sha256. */
  dependencies: Record<string, string>;
  /** sha256 over every other file of the plugin, bar its definition files. */
  files: string;
  /** The plugin's files `files` leaves out (command, dependency and definition files), to name the others that changed. */
  apart: string[];
}

/** A resolved harness as an agent version stores it: with the fingerprint of what it runs. */
export type FingerprintedHarness = ResolvedHarness & { fingerprint?: HarnessFingerprint };

const sha256 = (data: string | Buffer): string => createHash("sha256").update(data).digest("hex");

/**
 * Every file below `root` by relative path, with its content's sha256, in a stable order; not .git, node_modules or
 * TypeScript's incremental build records (`*.tsbuildinfo`), which nothing runs and every build of a test rewrites.
 */
export function hashFiles(root: string, options: { capBytes?: number } = {}): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string): void => {
    const entries = readdirSync(dir, { withFileTypes: true }).sort((a, b) =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0,
    );
    for (const entry of entries) {
      if (entry.name === ".git" || entry.name === "node_modules" || entry.name.endsWith(".tsbuildinfo")) continue;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.isFile())
        files.set(path.relative(root, full).split(path.sep).join("/"), hashFile(full, options.capBytes));
    }
  };
  walk(root);
  return files;
}

function hashFile(file: string, capBytes?: number): string {
  const stat = statSync(file);
  if (capBytes !== undefined && stat.size > capBytes) return `size:${stat.size}:mtime:${stat.mtimeMs}`;
  return sha256(readFileSync(file));
}

function digest(files: Iterable<[string, string]>): string {
  const hash = createHash("sha256");
  for (const [rel, h] of files) hash.update(`${rel}\0${h}\n`);
  return hash.digest("hex");
}

/** The package a file reached through node_modules belongs to: the nearest folder above its real path with a package.json. */
function packageRoot(file: string): string | undefined {
  let dir = path.dirname(file);
  for (;;) {
    if (existsSync(path.join(dir, "package.json"))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/** A program or file outside the plugin's own tree: its content, or its package's when it was reached through node_modules. */
function hashOutside(resolved: string): string {
  const real = realpathSync(resolved);
  const throughNodeModules =
    resolved.split(path.sep).includes("node_modules") || real.split(path.sep).includes("node_modules");
  const root = throughNodeModules ? packageRoot(real) : undefined;
  if (!root) return `file ${hashFile(real, MAX_HASHED_FILE_BYTES)}`;
  let id = path.basename(root);
  try {
    const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
      name?: string;
      version?: string;
    };
    id = `${pkg.name ?? id}@${pkg.version ?? "0.0.0"}`;
  } catch {
    // An unreadable package.json still hashes with the package's files.
  }
  return `package ${id} ${digest(hashFiles(root, { capBytes: MAX_HASHED_FILE_BYTES }))}`;
}

/**
 * Fingerprint what a harness runs. `definitionFiles` (relative to the
 * plugin) are the plugin's own definitions — its manifest, agents, graphs and
 * instructions — which are hashed with each agent, not with the harness.
 */
export function harnessFingerprint(options: {
  harness: ResolvedHarness;
  definitionFiles: Iterable<string>;
}): HarnessFingerprint {
  const root = options.harness.pluginPath;
  const tree = hashFiles(root);
  const claimed = new Set<string>(options.definitionFiles);
  const command: Record<string, string> = {};
  const resolved = resolveHarnessCommand(options.harness);
  options.harness.manifest.command.forEach((arg, index) => {
    const target = resolved[index]!;
    if (arg.startsWith("-")) return;
    if (index === 0 && arg === "node" && target === process.execPath) {
      command[arg] = `node ${process.version}`;
      return;
    }
    if (!path.isAbsolute(target) || !existsSync(target)) return;
    const rel = path.relative(root, target).split(path.sep).join("/");
    const inTree = !rel.startsWith("..") && !path.isAbsolute(rel) && rel.split("/")[0] !== "node_modules";
    if (inTree) {
      const inside = [...tree].filter(([file]) => file === rel || rel === "" || file.startsWith(`${rel}/`));
      for (const [file] of inside) claimed.add(file);
      command[arg] =
        inside.length === 1 && inside[0]![0] === rel ? `file ${inside[0]![1]}` : `folder ${digest(inside)}`;
    } else if (statSync(target).isFile()) {
      command[arg] = hashOutside(target);
    }
  });
  const dependencies: Record<string, string> = {};
  for (const file of DEPENDENCY_FILES) {
    const h = tree.get(file);
    if (h) {
      dependencies[file] = h;
      claimed.add(file);
    }
  }
  const installed = path.join(root, INSTALLED_DEPENDENCIES);
  if (existsSync(installed)) dependencies[INSTALLED_DEPENDENCIES.split(path.sep).join("/")] = hashFile(installed);
  return {
    command,
    dependencies,
    files: digest([...tree].filter(([file]) => !claimed.has(file))),
    apart: [...claimed].filter((f) => tree.has(f)).sort(),
  };
}

function changedKeys(before: Record<string, string>, after: Record<string, string>): string[] {
  return [...new Set([...Object.keys(before), ...Object.keys(after)])].filter((k) => before[k] !== after[k]).sort();
}

function listed(names: string[]): string {
  return names.length <= 3 ? names.join(", ") : `${names.slice(0, 3).join(", ")} and ${names.length - 3} more`;
}

/**
 * Why a harness's fingerprint differs from the one an agent's previous
 * version recorded, in words: "harness fake's command file harness.mjs
 * changed". The other files are named when both copies are still on disk.
 */
export function fingerprintChanges(options: {
  harness: FingerprintedHarness;
  previous: FingerprintedHarness;
}): string[] {
  const { harness, previous } = options;
  const before = previous.fingerprint;
  const after = harness.fingerprint;
  if (!after) return [];
  const name = harness.manifest.name;
  if (!before) return [`harness ${name}'s files were not hashed when the previous version was published`];
  const reasons: string[] = [];
  for (const arg of changedKeys(before.command, after.command)) {
    const kind = after.command[arg]?.startsWith("package ") ? "package" : "file";
    reasons.push(
      `harness ${name}'s command ${kind} ${arg} ${arg in after.command ? (arg in before.command ? "changed" : "is new") : "is gone"}`,
    );
  }
  const deps = changedKeys(before.dependencies, after.dependencies);
  if (deps.length > 0) reasons.push(`plugin ${harness.plugin}'s dependencies changed (${listed(deps)})`);
  if (before.files !== after.files) {
    let names: string[] = [];
    if (existsSync(previous.pluginPath) && existsSync(harness.pluginPath)) {
      const old = hashFiles(previous.pluginPath);
      const now = hashFiles(harness.pluginPath);
      const apart = new Set([...before.apart, ...after.apart]);
      names = changedKeys(Object.fromEntries(old), Object.fromEntries(now)).filter((f) => !apart.has(f));
    }
    reasons.push(`plugin ${harness.plugin}'s files changed${names.length > 0 ? ` (${listed(names)})` : ""}`);
  }
  return reasons;
}
