// Every workspace says what it needs: no `*` range (an install could bring
// any major), and each package its sources import is among its
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

void test("every package a workspace's sources import, types included, is one of its dependencies", () => {
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
      // Type-only imports too: they vanish from the JavaScript but stay in
      // the declarations the build emits, which a dependent compiles against.
      const imported = [
        ...text.matchAll(/^import [^;]*?from "([^"]+)";/gms),
        ...text.matchAll(/^export [^;]*?from "([^"]+)";/gms),
        ...text.matchAll(/\bimport\("([^"]+)"\)/g),
        ...text.matchAll(/import\.meta\.resolve\(`?"?([@a-z][^`"$]*)/g),
      ].map((m) => m[1]!);
      for (const specifier of imported) {
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

interface LockEntry {
  resolved?: string;
  link?: boolean;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}

/**
 * What installing a workspace brings, from package-lock.json as `npm ls`
 * reads it: its dependencies and theirs, each looked up the way Node resolves
 * it (the nearest node_modules up from the package), workspaces followed
 * through their links.
 */
function installedWith(workspaceDir: string): Set<string> {
  const lock = JSON.parse(readFileSync(path.join(root, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockEntry>;
  };
  const found = new Set<string>();
  const visit = (location: string): void => {
    const entry = lock.packages[location]!;
    for (const name of Object.keys({ ...entry.dependencies, ...entry.optionalDependencies })) {
      let at = location;
      let key: string | undefined;
      for (;;) {
        const candidate = `${at ? `${at}/` : ""}node_modules/${name}`;
        if (lock.packages[candidate]) {
          key = candidate;
          break;
        }
        if (!at) break;
        const up = at.lastIndexOf("/node_modules/");
        at = up === -1 ? "" : at.slice(0, up);
      }
      if (key === undefined || found.has(key)) continue;
      found.add(key);
      const target = lock.packages[key]!;
      visit(target.link ? target.resolved! : key);
    }
  };
  visit(workspaceDir);
  return new Set(
    [...found].map((key) => packageOf(key.slice(key.lastIndexOf("node_modules/") + "node_modules/".length))),
  );
}

// The LLM proxy only publishes events: @oz0/events-client is its client. The
// sandbox publishes none (the orchestrator publishes what a node reports of
// its sessions). @oz0/events (the service, with kafkajs and a native SQLite
// build) must not come back to either through an import or a manifest.
void test("the LLM proxy publishes through @oz0/events-client, the sandbox not at all, and neither installs the events service", () => {
  assert.ok(read("services/llm-proxy/package.json").dependencies?.["@oz0/events-client"]);
  assert.equal(read("services/sandbox/package.json").dependencies?.["@oz0/events-client"], undefined);
  for (const dir of ["services/sandbox", "services/llm-proxy"]) {
    const manifest = read(`${dir}/package.json`);
    for (const field of ["dependencies", "devDependencies", "peerDependencies", "optionalDependencies"] as const)
      assert.equal(manifest[field]?.["@oz0/events"], undefined, `${dir}: ${field} names @oz0/events`);
    const sources = execFileSync("git", ["ls-files", dir], { cwd: root, encoding: "utf8" })
      .split("\n")
      .filter((f) => /\.(ts|tsx|mjs|js)$/.test(f) && !f.includes("/dist/"));
    for (const source of sources) {
      const text = readFileSync(path.join(root, source), "utf8");
      assert.doesNotMatch(text, /["'`]@oz0\/events(\/[^"'`]*)?["'`]/, `${source} imports @oz0/events`);
    }
    const installed = installedWith(dir);
    for (const heavy of ["@oz0/events", "kafkajs"])
      assert.ok(!installed.has(heavy), `installing ${dir} brings ${heavy} (see \`npm ls ${heavy} -w ${dir}\`)`);
  }
  assert.ok(!installedWith("services/sandbox").has("better-sqlite3"), "installing the sandbox brings better-sqlite3");
  assert.ok(
    installedWith("services/events").has("kafkajs"),
    "the lock is read right: the events service brings kafkajs",
  );
});
