#!/usr/bin/env node
// `npm run lint` part: type-checks every workspace's tests and the benchmarks.
// They run through tsx, which strips types without checking them, so a wrong
// argument (a message passed where a poll interval goes) would otherwise only
// show as odd behaviour at run time.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { root, workspaceDirs } from "./workspaces.mjs";

const projects = [...workspaceDirs().map((d) => path.join(d, "test")), path.join(root, "bench")].filter((d) => existsSync(path.join(d, "tsconfig.json")));
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
try {
  execFileSync(process.execPath, [tsc, "-b", ...projects.map((p) => path.relative(root, p))], { cwd: root, stdio: "inherit" });
} catch {
  process.exit(1);
}
