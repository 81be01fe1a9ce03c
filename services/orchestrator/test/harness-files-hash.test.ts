// What the harness hash reads of a plugin's tree (agents/harness-fingerprint.ts):
// a build's records change no agent version, a module the harness loads does.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { hashFiles } from "../src/agents/harness-fingerprint.js";

void test("a plugin's files hash without .git, node_modules and TypeScript's build records", (t) => {
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-hash-files-"));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  for (const dir of ["dist", "test", ".git", "node_modules/dep"]) mkdirSync(path.join(root, dir), { recursive: true });
  writeFileSync(path.join(root, "dist", "main.js"), "console.log(1)\n");
  writeFileSync(path.join(root, "test", "tsconfig.tsbuildinfo"), '{"version":"5.9.3"}');
  writeFileSync(path.join(root, ".git", "HEAD"), "ref: refs/heads/main\n");
  writeFileSync(path.join(root, "node_modules", "dep", "index.js"), "");
  const before = hashFiles(root);
  assert.deepEqual([...before.keys()], ["dist/main.js"]);
  writeFileSync(path.join(root, "test", "tsconfig.tsbuildinfo"), '{"version":"5.9.3","root":[1]}');
  assert.deepEqual(hashFiles(root), before);
  writeFileSync(path.join(root, "dist", "main.js"), "console.log(2)\n");
  assert.notEqual(hashFiles(root).get("dist/main.js"), before.get("dist/main.js"));
});
