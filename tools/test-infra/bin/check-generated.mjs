#!/usr/bin/env node
// Fails when `buf generate` would change the committed generated code.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
execFileSync("npx", ["buf", "generate"], { cwd: root, stdio: "inherit" });
try {
  execFileSync("git", ["diff", "--exit-code", "--stat", "--", "sdk/proto/src/gen"], { cwd: root, stdio: "inherit" });
  const untracked = execFileSync("git", ["ls-files", "--others", "--exclude-standard", "sdk/proto/src/gen"], {
    cwd: root,
  })
    .toString()
    .trim();
  if (untracked) throw new Error(`untracked generated files:\n${untracked}`);
} catch (error) {
  console.error("generated code is stale: run `npm run generate` and commit sdk/proto/src/gen");
  console.error(String(error.message ?? error));
  process.exit(1);
}
console.log("generated code is fresh");
