#!/usr/bin/env node
// `npm run build`: one `tsc -b` over every workspace that has a tsconfig.json,
// so adding a package never means editing a shared list.
import { existsSync } from "node:fs";
import path from "node:path";
import { tscBuild, workspaceDirs } from "./workspaces.mjs";

tscBuild(
  workspaceDirs().filter((d) => existsSync(path.join(d, "tsconfig.json"))),
  process.argv.slice(2),
);
