// The fake harness's own tools: read a file, write a file, run a command,
// each confined to the session's working directory.
import { execFile } from "node:child_process";
import { mkdir, readFile, realpath, writeFile } from "node:fs/promises";
import path from "node:path";
import type { JsonObject } from "@bufbuild/protobuf";

/** Anthropic tool definitions of the working-directory tools. */
export const WORKING_DIR_TOOLS = [
  {
    name: "read_file",
    description: "Read a UTF-8 file in the working directory.",
    input_schema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  },
  {
    name: "write_file",
    description: "Write a UTF-8 file in the working directory, creating folders as needed.",
    input_schema: {
      type: "object",
      properties: { path: { type: "string" }, content: { type: "string" } },
      required: ["path", "content"],
    },
  },
  {
    name: "run_command",
    description: "Run a shell command in the working directory; returns its exit code and output.",
    input_schema: { type: "object", properties: { command: { type: "string" } }, required: ["command"] },
  },
];

/** Thrown for a path that leaves the working directory. */
export class PathEscapeError extends Error {}

/**
 * Resolves `relative` inside `root`, rejecting `..` escapes, absolute paths
 * elsewhere and symlinks that point out (the nearest existing ancestor is
 * resolved).
 */
export async function confine(root: string, relative: string): Promise<string> {
  const target = path.resolve(root, relative);
  let existing = target;
  for (;;) {
    try {
      existing = path.join(await realpath(existing), path.relative(existing, target));
      break;
    } catch {
      const parent = path.dirname(existing);
      if (parent === existing) break;
      existing = parent;
    }
  }
  const inside = path.relative(root, existing);
  if (inside.startsWith("..") || path.isAbsolute(inside)) {
    throw new PathEscapeError(`${relative} is outside the working directory`);
  }
  return existing;
}

/** Runs one working-directory tool; returns its output text or throws with what went wrong. */
export async function runWorkingDirTool(
  root: string,
  name: string,
  input: JsonObject,
  signal: AbortSignal,
): Promise<string> {
  switch (name) {
    case "read_file":
      return readFile(await confine(root, String(input.path)), "utf8");
    case "write_file": {
      const file = await confine(root, String(input.path));
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, String(input.content ?? ""));
      return `wrote ${String(input.path)}`;
    }
    case "run_command":
      // A command that exits non-zero is a failed call (as Claude Code's Bash tool reports it): its output is the error.
      return new Promise((resolve, reject) => {
        execFile(
          "/bin/sh",
          ["-c", String(input.command)],
          { cwd: root, signal, timeout: 120_000, maxBuffer: 1 << 20 },
          (error, stdout, stderr) => {
            const code = error ? ((error as { code?: unknown }).code ?? 1) : 0;
            const output = `exit code ${String(code)}\n${stdout}${stderr}`;
            if (code === 0) resolve(output);
            else reject(new Error(output));
          },
        );
      });
    default:
      throw new Error(`unknown tool ${name}`);
  }
}
