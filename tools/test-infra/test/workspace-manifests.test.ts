// Every workspace says what it needs: no `*` range (an install could bring
// any major), and each package its sources load at run time is among its
// dependencies (the orchestrator loaded the sandbox and the LLM proxy at run
// time without declaring them; they came only from the monorepo's hoisting).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { builtinModules } from "node:module";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const manifests = execFileSync("git", ["ls-files", "package.json", "*/package.json", "*/*/package.json"], {
  cwd: root,
  encoding: "utf8",
})
  .split("\n")
  .filter((f) => f !== "" && f !== "package.json");

interface Manifest {
  name: string;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

const read = (file: string): Manifest => JSON.parse(readFileSync(path.join(root, file), "utf8")) as Manifest;

void test("no workspace asks for any version of a package (`*`, `latest` or an empty range)", () => {
  const loose: string[] = [];
  for (const file of manifests) {
    const manifest = read(file);
    for (const field of ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"] as const) {
      for (const [name, range] of Object.entries(manifest[field] ?? {})) {
        if (range === "*" || range === "" || range === "latest")
          loose.push(`${file}: ${field}.${name} is ${JSON.stringify(range)}`);
      }
    }
  }
  assert.deepEqual(loose, []);
});

/** The package a bare specifier names: `@scope/name` or `name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}

void test("every package a workspace's sources load at run time is one of its dependencies", () => {
  const builtins = new Set(builtinModules);
  const undeclared: string[] = [];
  for (const file of manifests) {
    const dir = path.dirname(file);
    const manifest = read(file);
    const declared = new Set([
      manifest.name,
      ...Object.keys({ ...manifest.dependencies, ...manifest.peerDependencies, ...manifest.optionalDependencies }),
    ]);
    const sources = execFileSync(
      "git",
      ["ls-files", `${dir}/src/*.ts`, `${dir}/src/**/*.ts`, `${dir}/src/*.tsx`, `${dir}/src/**/*.tsx`],
      { cwd: root, encoding: "utf8" },
    )
      .split("\n")
      .filter(Boolean);
    for (const source of new Set(sources)) {
      const text = readFileSync(path.join(root, source), "utf8");
      // Type-only imports vanish from the build; everything else is loaded.
      const runtime = [
        ...text.matchAll(/^import (?!type\b)[^;]*?from "([^"]+)";/gms),
        ...text.matchAll(/^export (?!type\b)[^;]*?from "([^"]+)";/gms),
        ...text.matchAll(/\bimport\("([^"]+)"\)/g),
        ...text.matchAll(/import\.meta\.resolve\(`?"?([@a-z][^`"$]*)/g),
      ].map((m) => m[1]!);
      for (const specifier of runtime) {
        // A templated specifier (`@oz0/${name}`) is checked by the test below.
        if (
          specifier.startsWith(".") ||
          specifier.startsWith("node:") ||
          builtins.has(specifier) ||
          specifier.endsWith("/")
        )
          continue;
        const name = packageOf(specifier);
        if (!declared.has(name)) undeclared.push(`${source}: ${name}`);
      }
    }
  }
  assert.deepEqual([...new Set(undeclared)], []);
});

void test("the orchestrator declares every service its embedded stack starts (found with import.meta.resolve)", () => {
  const stack = readFileSync(path.join(root, "services/orchestrator/src/dev/embedded-stack.ts"), "utf8");
  assert.match(
    stack,
    /import\.meta\.resolve\(`@oz0\/\$\{name\}`\)/,
    "the embedded stack resolves each service by its package",
  );
  const dependencies = read("services/orchestrator/package.json").dependencies ?? {};
  for (const service of ["sandbox", "llm-proxy", "events"])
    assert.ok(dependencies[`@oz0/${service}`], `@oz0/orchestrator depends on @oz0/${service}`);
});
