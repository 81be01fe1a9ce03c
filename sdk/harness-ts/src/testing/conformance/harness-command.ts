// The harness command made absolute the way the orchestrator does it for a
// plugin manifest (services/orchestrator/src/agents/harness-command.ts): every case
// runs in a working directory of its own, so paths are resolved first,
// against the plugin's folder (for the kit: the caller's directory).
import { accessSync, constants, existsSync, realpathSync } from "node:fs";
import path from "node:path";
import { SYSTEM_PROGRAM_FOLDERS } from "../../host/system-program-folders.js";

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

function isWithin(file: string, dir: string): boolean {
  const relative = path.relative(dir, file);
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

/**
 * A program the kit runs but a session under bubblewrap cannot see (a pyenv
 * shim, a virtualenv's python, a tool in the home folder): on the stack its
 * job fails `spawn_failed`. Undefined when the program, and what its link
 * points to, lie in folders a session sees. Only the program is looked at:
 * what a script runs in turn is not known here.
 */
export function hiddenProgramNotice(command: readonly string[], pluginDir: string): string | undefined {
  const program = command[0];
  if (program === undefined || !path.isAbsolute(program)) return undefined;
  let target = program;
  try {
    target = realpathSync.native(program);
  } catch {
    // Not there at all: the kit's cases say so.
  }
  const seen = [...SYSTEM_PROGRAM_FOLDERS, path.dirname(process.execPath), pluginDir];
  if ([program, target].every((file) => seen.some((dir) => isWithin(file, dir)))) return undefined;
  return `the harness's program ${program}${target !== program ? ` (${target})` : ""} is outside the folders a session sees under bubblewrap on the stack (${SYSTEM_PROGRAM_FOLDERS.join(", ")}, node's folder, the plugin's and the session's own): there its job fails spawn_failed, not visible inside the sandbox, unless the sandbox's OZ0_SANDBOX_READ_ONLY_PATHS adds its folder; start a script through its shebang (#!/usr/bin/env python3) or name a system interpreter`;
}
