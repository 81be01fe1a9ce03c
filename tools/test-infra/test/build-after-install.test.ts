// `npm run build` builds every project again after an install: tsc -b takes a
// project as built when its own sources are older than its build info, and
// what changed in node_modules (a package's declarations) is not among them.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
// @ts-expect-error: a JavaScript module of the runner's, without declarations.
import { builtBeforeInstall } from "../bin/workspaces.mjs";

const listed = builtBeforeInstall as (projects: string[], installed: string) => string[];

void test("the projects built before node_modules last changed are built again, and only those", (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-build-after-install-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const at = (file: string, seconds: number): void => {
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, "{}");
    utimesSync(file, seconds, seconds);
  };
  const installed = path.join(dir, "node_modules", ".package-lock.json");
  at(installed, 2_000);
  const [before, after, never] = ["before", "after", "never"].map((name) => path.join(dir, name));
  at(path.join(before!, "tsconfig.tsbuildinfo"), 1_000);
  at(path.join(after!, "tsconfig.tsbuildinfo"), 3_000);
  mkdirSync(never!);
  assert.deepEqual(listed([before!, after!, never!], installed), [before]);
  assert.deepEqual(listed([before!], path.join(dir, "no-install-here")), [], "nothing installed: nothing to go by");
});
