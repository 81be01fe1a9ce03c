// The list against what the producers send. The compiler already refuses a
// producer type that is not in the list (producers take a LifecycleType) and
// a policy that misses one or names one that is not (the events service's
// policy is a Record<LifecycleType, …>). What it cannot see is a type in the
// list that nobody sends, or one sent by a service its `sentBy` does not
// name: this test reads every package that can publish (it depends on
// @oz0/events or on this package) with the type checker, collects the types
// each one's source sends, and compares with the list.
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { LIFECYCLE_EVENTS, LIFECYCLE_TYPES, type LifecycleType } from "@oz0/events-client";
import { lifecycleSends } from "./support/lifecycle-call-sites.js";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

interface Workspace {
  name: string;
  dir: string;
}

/** The workspaces that can publish lifecycle events: those that depend on @oz0/events or @oz0/events-client. */
function publishers(): Workspace[] {
  const globs = (JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { workspaces: string[] })
    .workspaces;
  const dirs = globs.flatMap((glob) => {
    if (!glob.endsWith("/*")) return [path.join(root, glob)];
    const parent = path.join(root, glob.slice(0, -2));
    return existsSync(parent)
      ? readdirSync(parent, { withFileTypes: true })
          .filter((e) => e.isDirectory())
          .map((e) => path.join(parent, e.name))
      : [];
  });
  return dirs.flatMap((dir) => {
    const file = path.join(dir, "package.json");
    if (!existsSync(file) || !existsSync(path.join(dir, "src"))) return [];
    const pkg = JSON.parse(readFileSync(file, "utf8")) as { name: string; dependencies?: Record<string, string> };
    const deps = Object.keys(pkg.dependencies ?? {});
    return deps.includes("@oz0/events") || deps.includes("@oz0/events-client") ? [{ name: pkg.name, dir }] : [];
  });
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts"))
    .map((e) => path.join(e.parentPath, e.name));
}

void test("every type in the list is sent, each by exactly the services its sentBy names, and no send is of an unknown type", () => {
  const workspaces = publishers();
  const names = workspaces.map((w) => w.name);
  for (const producer of ["@oz0/orchestrator", "@oz0/llm-proxy", "@oz0/events"]) {
    assert.ok(
      names.includes(producer),
      `${producer} is not read (found ${names.join(", ")}): does it still depend on @oz0/events?`,
    );
  }
  const files = workspaces.flatMap((w) => sourceFiles(path.join(w.dir, "src")));
  const { sent, unresolved } = lifecycleSends(files);
  assert.deepEqual(
    unresolved.map((s) => `${path.relative(root, s.file)}:${s.line} ${s.text}`),
    [],
    "these sends could be any lifecycle type: give the argument a narrower type (a literal, a conditional, an `as const` map)",
  );

  // Type → the packages whose source sends it, against the list's sentBy.
  const packageOf = (file: string): string => workspaces.find((w) => file.startsWith(w.dir + path.sep))!.name;
  const actual = Object.fromEntries(
    [...sent].map(([type, sites]) => [type, [...new Set(sites.map((s) => packageOf(s.file)))].sort()]),
  );
  const expected = Object.fromEntries(
    LIFECYCLE_TYPES.map((type: LifecycleType) => [
      type,
      LIFECYCLE_EVENTS[type].sentBy.map((source) => `@oz0/${source}`).sort(),
    ]),
  );
  assert.deepEqual(sortedKeys(actual), sortedKeys(expected));
});

function sortedKeys<T>(record: Record<string, T>): Record<string, T> {
  return Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
}
