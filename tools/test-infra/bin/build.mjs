#!/usr/bin/env node
// `npm run build`: one `tsc -b` over every workspace that has a tsconfig.json,
// so adding a package never means editing a shared list.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { root, workspaceDirs } from "./workspaces.mjs";

const projects = workspaceDirs().filter((d) => existsSync(path.join(d, "tsconfig.json")));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
try {
  execFileSync(process.execPath, [tsc, "-b", ...projects.map((p) => path.relative(root, p)), ...process.argv.slice(2)], {
    cwd: root,
    stdio: "inherit",
  });
} catch {
  process.exit(1);
}
