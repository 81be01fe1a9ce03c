#!/usr/bin/env node
// `npm run lint` part: type-checks every workspace's tests and the benchmarks.
// They run through tsx, which strips types without checking them, so a wrong
// argument (a message passed where a poll interval goes) would otherwise only
// show as odd behaviour at run time.
import { existsSync } from "node:fs";
import path from "node:path";
import { root, tscBuild, workspaceDirs } from "./workspaces.mjs";

tscBuild(
  [...workspaceDirs().map((d) => path.join(d, "test")), path.join(root, "bench")].filter((d) =>
    existsSync(path.join(d, "tsconfig.json")),
  ),
);
