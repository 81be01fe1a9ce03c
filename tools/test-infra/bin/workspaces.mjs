// The workspace folders named by the root package.json (`dir` or `dir/*`),
// and `tsc -b` over some of them.
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
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

/**
 * The projects (absolute folders) built before `node_modules` last changed: `tsc -b` takes a project as built
 * when its own sources are older than its build info, and declarations in `node_modules` are not among them.
 * @types/node 20 → 24 refused 13 call sites a fresh clone's build found, and an incremental build here did not.
 * `installed`: the file npm writes on every install.
 */
export function builtBeforeInstall(projects, installed = path.join(root, "node_modules", ".package-lock.json")) {
  if (!existsSync(installed)) return [];
  const installedAt = statSync(installed).mtimeMs;
  return projects.filter((dir) => {
    const info = path.join(dir, "tsconfig.tsbuildinfo");
    return existsSync(info) && statSync(info).mtimeMs < installedAt;
  });
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
