// The project's docs live in the repository: no page links outside it (a
// fresh clone has nothing beside it), and every relative link names a file
// that exists.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const pages = execFileSync("git", ["ls-files", "*.md"], { cwd: root, encoding: "utf8" })
  .split("\n")
  .filter((f) => f && !f.includes("node_modules"));

void test("no doc points outside the repository, and every relative link resolves", () => {
  assert.ok(pages.length > 10, `found ${pages.length} pages`);
  const broken: string[] = [];
  for (const page of pages) {
    const text = readFileSync(path.join(root, page), "utf8");
    if (/\.\.\/shared\/|shared\/(design|seeds)\//.test(text))
      broken.push(`${page}: names the workspace's shared folder, which is not part of the project`);
    for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
      if (/^[a-z]+:/.test(target!)) continue;
      const resolved = path.resolve(root, path.dirname(page), target!);
      if (!resolved.startsWith(root + path.sep)) broken.push(`${page}: ${target} leaves the repository`);
      else if (!existsSync(resolved)) broken.push(`${page}: ${target} does not exist`);
    }
  }
  assert.deepEqual(broken, []);
});
