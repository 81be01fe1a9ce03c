// The workspace folders named by the root package.json (`dir` or `dir/*`),
// and `tsc -b` over some of them.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

export function workspaceDirs() {
  const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8"));
  return pkg.workspaces
    .flatMap((w) => {
      if (!w.endsWith("/*")) return [w];
      const parent = path.join(root, w.slice(0, -2));
      if (!existsSync(parent)) return [];
      return readdirSync(parent, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => path.join(w.slice(0, -2), e.name));
    })
    .filter((d) => existsSync(path.join(root, d, "package.json")))
    .map((d) => path.join(root, d));
}

/** `tsc -b` over the project folders (absolute) with `args`; exits 1 when it fails (tsc has printed why). */
export function tscBuild(projects, args = []) {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  try {
    execFileSync(process.execPath, [tsc, "-b", ...projects.map((p) => path.relative(root, p)), ...args], {
      cwd: root,
      stdio: "inherit",
    });
  } catch {
    process.exit(1);
  }
}
