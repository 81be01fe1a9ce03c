#!/usr/bin/env node
// `npm run build`: one `tsc -b` over every workspace that has a tsconfig.json,
// so adding a package never means editing a shared list (all of them again
// after an install, builtBeforeInstall); then each workspace's
// `bundle` script, if it has one (the web console's browser bundle).
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { builtBeforeInstall, tscBuild, workspaceDirs } from "./workspaces.mjs";

const dirs = workspaceDirs();
const projects = dirs.filter((d) => existsSync(path.join(d, "tsconfig.json")));
// After an install, every project is built again: what changed in node_modules is not among tsc -b's inputs.
const force = builtBeforeInstall(projects).length > 0 ? ["--force"] : [];
tscBuild(projects, [...force, ...process.argv.slice(2)]);
for (const dir of dirs) {
  const bundle = JSON.parse(readFileSync(path.join(dir, "package.json"), "utf8")).scripts?.bundle;
  if (!bundle) continue;
  try {
    execFileSync("sh", ["-c", bundle], { cwd: dir, stdio: "inherit" });
  } catch {
    process.exit(1);
  }
}
