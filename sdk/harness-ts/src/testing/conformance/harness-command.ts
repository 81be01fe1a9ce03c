// The harness command made absolute the way the orchestrator does it for a
// plugin manifest (services/orchestrator/src/agents/harness-command.ts): every case
// runs in a working directory of its own, so paths are resolved first,
// against the plugin's folder (for the kit: the caller's directory).
import { accessSync, constants, existsSync } from "node:fs";
import path from "node:path";

/**
 * An argument naming a file or folder that exists under `baseDir`
 * (`harness.py`, `dist/main.js`, `./bin/harness`) becomes absolute; `node`
 * as the program is this Node; another bare program name is looked up on
 * `PATH` (the caller's, as the orchestrator looks it up on its own);
 * absolute paths and options (`-x`) are kept.
 */
export function resolveHarnessCommand(
  command: readonly string[],
  baseDir: string,
  searchPath: string = process.env.PATH ?? "",
): string[] {
  return command.map((arg, index) => {
    if (path.isAbsolute(arg) || arg.startsWith("-") || arg === "") return arg;
    const inBase = path.resolve(baseDir, arg);
    if (existsSync(inBase)) return inBase;
    if (index === 0 && !arg.includes("/"))
      return arg === "node" ? process.execPath : (findProgram(arg, searchPath) ?? arg);
    return arg;
  });
}

function findProgram(name: string, searchPath: string): string | undefined {
  for (const dir of searchPath.split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}
