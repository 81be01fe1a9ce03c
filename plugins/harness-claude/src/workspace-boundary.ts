// Keeps Claude Code's file tools inside the session's working directory (and
// the skills it may read). Claude Code asks before touching a path outside its
// cwd, but an allowing runtime would let it through, so the harness refuses
// such calls itself. Bash is not confined here: that is the sandbox's job.
import path from "node:path";
import { realTarget } from "@oz0/harness";

/** Tool input fields that hold a path, per tool. */
const PATH_FIELDS: Readonly<Record<string, readonly string[]>> = {
  Read: ["file_path"],
  Write: ["file_path"],
  Edit: ["file_path"],
  Glob: ["path"],
  Grep: ["path"],
};

const WRITING_TOOLS = new Set(["Write", "Edit"]);

function inside(root: string, target: string): boolean {
  const relative = path.relative(root, target);
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

export interface WorkspaceBoundary {
  /** Why the call is refused, or undefined when its paths stay inside. */
  check(tool: string, input: Record<string, unknown>): string | undefined;
}

/**
 * Whether a Glob pattern could match outside the directory it is searched
 * from: an absolute pattern (Claude Code globs it from its own root,
 * whatever `path` says), a `~` one, or one with a `..` segment.
 */
function patternLeaves(pattern: string): boolean {
  return path.isAbsolute(pattern) || pattern.startsWith("~") || pattern.split(/[/\\]/).includes("..");
}

export function workspaceBoundary(options: {
  workingDir: string;
  readOnlyDirs?: readonly string[];
}): WorkspaceBoundary {
  const root = realTarget(path.resolve(options.workingDir));
  const readable = [root, ...(options.readOnlyDirs ?? []).map((dir) => realTarget(path.resolve(dir)))];
  return {
    check(tool, input) {
      if (tool === "Glob" && typeof input.pattern === "string" && patternLeaves(input.pattern))
        return `Glob patterns must stay inside the directory they search: ${input.pattern} is absolute or leaves it, so the call was not run; give a relative pattern and a path inside the working directory ${options.workingDir}.`;
      for (const field of PATH_FIELDS[tool] ?? []) {
        const value = input[field];
        if (typeof value !== "string" || value === "") continue;
        // Claude Code reads `~` as the session's HOME (its state directory), not as a folder of the working directory.
        if (value.startsWith("~"))
          return `${tool} may only use paths inside the working directory ${options.workingDir}; ${value} starts with ~ (the session's home, outside it), so the call was not run.`;
        const target = realTarget(path.resolve(root, value));
        const allowed = WRITING_TOOLS.has(tool) ? [root] : readable;
        if (!allowed.some((dir) => inside(dir, target))) {
          return `${tool} may only use paths inside the working directory ${options.workingDir}; ${value} is outside it, so the call was not run.`;
        }
      }
      return undefined;
    },
  };
}
