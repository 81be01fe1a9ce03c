// The kit's tool contract. The scripted model drives a harness's own file
// tools through two abstract operations, read(path) and write(path, content);
// a tool profile says which of the harness's tools carry them and what their
// input looks like. The kit recognises the profiles it knows from the tools
// offered in the first model request; a harness with other tools passes its
// own profile (a JSON file, `--tool-profile FILE`).
import { readFileSync } from "node:fs";
import path from "node:path";

/** The tools a conformance scenario makes the model call, in one harness's vocabulary. */
export interface ToolProfile {
  /** For messages: `oz0`, `claude-code`, or the profile file's `name`. */
  name: string;
  /** The tool that writes a file, and its input for a path (relative to the working dir, or absolute) and content. */
  writeFile: { tool: string; input: (workDir: string, path: string, content: string) => Record<string, unknown> };
  /** The tool that reads a file. */
  readFile: { tool: string; input: (workDir: string, path: string) => Record<string, unknown> };
}

/** The fake harnesses' tools (`read_file` {path}, `write_file` {path, content}): paths relative to the working directory. */
export const OZ0_TOOL_PROFILE: ToolProfile = toolProfileFromJson({
  name: "oz0",
  read: { tool: "read_file", input: { path: "{path}" } },
  write: { tool: "write_file", input: { path: "{path}", content: "{content}" } },
});

/** Claude Code's tools (`Read` {file_path}, `Write` {file_path, content}): absolute paths. */
export const CLAUDE_CODE_TOOL_PROFILE: ToolProfile = toolProfileFromJson({
  name: "claude-code",
  read: { tool: "Read", input: { file_path: "{absolutePath}" } },
  write: { tool: "Write", input: { file_path: "{absolutePath}", content: "{content}" } },
});

/** Profiles tried in order against the offered tool names when none is given. */
export const KNOWN_TOOL_PROFILES: readonly ToolProfile[] = [OZ0_TOOL_PROFILE, CLAUDE_CODE_TOOL_PROFILE];

/**
 * A tool profile as JSON (the `--tool-profile FILE` format). In `input`,
 * every string may use `{path}` (the path as the case means it: relative to
 * the working directory, or absolute when it points outside),
 * `{absolutePath}` (resolved against the working directory) and, for
 * `write`, `{content}`.
 */
export interface ToolProfileJson {
  name: string;
  read: { tool: string; input: Record<string, unknown> };
  write: { tool: string; input: Record<string, unknown> };
}

/** Builds a profile from its JSON form; throws with what is wrong. */
export function toolProfileFromJson(json: unknown, where = "tool profile"): ToolProfile {
  const fail = (what: string): never => {
    throw new Error(
      `${where}: ${what}; expected {"name": "…", "read": {"tool": "…", "input": {"…": "{path}"}}, "write": {"tool": "…", "input": {"…": "{path}", "…": "{content}"}}}`,
    );
  };
  if (json === null || typeof json !== "object" || Array.isArray(json)) return fail("not a JSON object");
  const { name, read, write } = json as Partial<ToolProfileJson>;
  if (typeof name !== "string" || name === "") fail("`name` must be a non-empty string");
  const operation = (value: unknown, key: string): { tool: string; input: Record<string, unknown> } => {
    const op = value as { tool?: unknown; input?: unknown } | undefined;
    if (op === undefined || op === null || typeof op !== "object") return fail(`\`${key}\` is missing`);
    if (typeof op.tool !== "string" || op.tool === "") return fail(`\`${key}.tool\` must be the harness's tool name`);
    if (op.input === null || typeof op.input !== "object" || Array.isArray(op.input))
      return fail(`\`${key}.input\` must be an object template`);
    return { tool: op.tool, input: op.input as Record<string, unknown> };
  };
  const r = operation(read, "read");
  const w = operation(write, "write");
  if (!JSON.stringify(r.input).match(/\{(path|absolutePath)\}/))
    fail("`read.input` never uses {path} or {absolutePath}");
  if (!JSON.stringify(w.input).match(/\{(path|absolutePath)\}/))
    fail("`write.input` never uses {path} or {absolutePath}");
  if (!JSON.stringify(w.input).includes("{content}")) fail("`write.input` never uses {content}");
  return {
    name: name as string,
    readFile: {
      tool: r.tool,
      input: (workDir, file) =>
        fill(r.input, { path: file, absolutePath: absolute(workDir, file), content: "" }) as Record<string, unknown>,
    },
    writeFile: {
      tool: w.tool,
      input: (workDir, file, content) =>
        fill(w.input, { path: file, absolutePath: absolute(workDir, file), content }) as Record<string, unknown>,
    },
  };
}

/**
 * A profile by name (`oz0`, `claude-code`) or from a JSON file (relative to
 * `baseDir`). Throws with what is wrong.
 */
export function loadToolProfile(nameOrFile: string, baseDir: string = process.cwd()): ToolProfile {
  const known = KNOWN_TOOL_PROFILES.find((p) => p.name === nameOrFile);
  if (known !== undefined) return known;
  const file = path.resolve(baseDir, nameOrFile);
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new Error(
      `--tool-profile ${nameOrFile}: not a known profile (${KNOWN_TOOL_PROFILES.map((p) => p.name).join(", ")}) and not a readable file (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new Error(`${file}: not JSON (${(error as Error).message})`);
  }
  return toolProfileFromJson(json, file);
}

/** Tool names offered in a model request body, for the Anthropic and OpenAI wire formats. */
export function offeredToolNames(body: unknown): string[] {
  const tools = (body as { tools?: unknown } | undefined)?.tools;
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool: { name?: unknown; function?: { name?: unknown } }) => {
    const name = tool.name ?? tool.function?.name;
    return typeof name === "string" ? [name] : [];
  });
}

/** The first profile whose tools are all offered. */
export function detectToolProfile(
  offered: readonly string[],
  profiles: readonly ToolProfile[] = KNOWN_TOOL_PROFILES,
): ToolProfile | undefined {
  return profiles.find((p) => offered.includes(p.writeFile.tool) && offered.includes(p.readFile.tool));
}

function fill(template: unknown, values: Record<"path" | "absolutePath" | "content", string>): unknown {
  if (typeof template === "string")
    return template.replace(/\{(path|absolutePath|content)\}/g, (_m, key: keyof typeof values) => values[key]);
  if (Array.isArray(template)) return template.map((item) => fill(item, values));
  if (template !== null && typeof template === "object")
    return Object.fromEntries(Object.entries(template).map(([k, v]) => [k, fill(v, values)]));
  return template;
}

function absolute(workDir: string, file: string): string {
  return path.isAbsolute(file) ? file : path.join(workDir, file);
}
