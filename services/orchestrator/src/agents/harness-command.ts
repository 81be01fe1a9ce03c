// Turn a harness manifest's command into an absolute one: paths are relative
// to the plugin's folder; a bare program name is looked up on PATH and in the
// node_modules/.bin folders above this package (where workspace binaries such
// as oz0-fake-harness live); `node` is this very Node.
import { accessSync, constants, existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ResolvedHarness } from "../store/job-store.js";

const here = path.dirname(fileURLToPath(import.meta.url));

function binDirs(): string[] {
  const dirs: string[] = [];
  let dir = here;
  for (;;) {
    dirs.push(path.join(dir, "node_modules", ".bin"));
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  return [...(process.env.PATH ?? "").split(path.delimiter).filter(Boolean), ...dirs];
}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

export function findProgram(name: string): string | undefined {
  if (name === "node") return process.execPath;
  for (const dir of binDirs()) {
    const candidate = path.join(dir, name);
    if (isExecutable(candidate)) return candidate;
  }
  return undefined;
}

export function resolveHarnessCommand(harness: ResolvedHarness): string[] {
  return harness.manifest.command.map((arg, index) => {
    if (path.isAbsolute(arg) || arg.startsWith("-")) return arg;
    const inPlugin = path.join(harness.pluginPath, arg);
    // Arguments naming files in the plugin (`dist/main.js`, `harness.mjs`) become absolute.
    if (existsSync(inPlugin)) return inPlugin;
    if (index === 0 && !arg.includes("/")) return findProgram(arg) ?? arg;
    return arg;
  });
}
