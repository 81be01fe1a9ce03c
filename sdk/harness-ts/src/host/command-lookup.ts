// Whether a harness command can run at all, checked before launching so a
// wrapper (setpriv, bwrap, a containment wrapper) does not turn "no such
// command" into a harness that exited without a result.
import { accessSync, constants } from "node:fs";
import path from "node:path";
import type { LaunchSpec } from "./process-launcher.js";

/** The file `command[0]` names, as execvp would find it with the session's PATH; undefined when there is none. */
export function findCommand(spec: LaunchSpec): string | undefined {
  const file = spec.command[0] ?? "";
  if (file === "") return undefined;
  const candidates = file.includes("/")
    ? [path.resolve(spec.cwd, file)]
    : (spec.env.PATH ?? "")
        .split(":")
        .filter((dir) => dir !== "")
        .map((dir) => path.join(dir, file));
  return candidates.find((candidate) => {
    try {
      accessSync(candidate, constants.X_OK);
      return true;
    } catch {
      return false;
    }
  });
}

/** Whether `command[0]` names an executable, as execvp would find it with the session's PATH. */
export function commandIsExecutable(spec: LaunchSpec): boolean {
  return findCommand(spec) !== undefined;
}
