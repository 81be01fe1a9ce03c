// How the conformance kit's scripted model names the harness's file and shell
// tools. Harnesses name their tools differently; the kit recognises the ones
// it knows from the tools offered in the first model request.

/** The tools a conformance scenario makes the model call, in one harness's vocabulary. */
export interface ToolProfile {
  /** For messages: `oz0` or `claude-code`. */
  name: string;
  /** The tool that writes a file, and its input for a path (relative to the working dir) and content. */
  writeFile: { tool: string; input: (workDir: string, path: string, content: string) => Record<string, unknown> };
  /** The tool that reads a file. */
  readFile: { tool: string; input: (workDir: string, path: string) => Record<string, unknown> };
}

/** The fake harnesses' tools: paths relative to the working directory. */
export const OZ0_TOOL_PROFILE: ToolProfile = {
  name: "oz0",
  writeFile: { tool: "write_file", input: (_workDir, path, content) => ({ path, content }) },
  readFile: { tool: "read_file", input: (_workDir, path) => ({ path }) },
};

/** Claude Code's tools: absolute `file_path`s. */
export const CLAUDE_CODE_TOOL_PROFILE: ToolProfile = {
  name: "claude-code",
  writeFile: { tool: "Write", input: (workDir, path, content) => ({ file_path: absolute(workDir, path), content }) },
  readFile: { tool: "Read", input: (workDir, path) => ({ file_path: absolute(workDir, path) }) },
};

/** Profiles tried in order against the offered tool names. */
export const KNOWN_TOOL_PROFILES: readonly ToolProfile[] = [OZ0_TOOL_PROFILE, CLAUDE_CODE_TOOL_PROFILE];

/** Tool names offered in a model request body, for the Anthropic and OpenAI wire formats. */
export function offeredToolNames(body: unknown): string[] {
  const tools = (body as { tools?: unknown } | undefined)?.tools;
  if (!Array.isArray(tools)) return [];
  return tools.flatMap((tool: { name?: unknown; function?: { name?: unknown } }) => {
    const name = tool.name ?? tool.function?.name;
    return typeof name === "string" ? [name] : [];
  });
}

/** The first known profile whose tools are all offered. */
export function detectToolProfile(offered: readonly string[], profiles: readonly ToolProfile[] = KNOWN_TOOL_PROFILES): ToolProfile | undefined {
  return profiles.find((p) => offered.includes(p.writeFile.tool) && offered.includes(p.readFile.tool));
}

function absolute(workDir: string, path: string): string {
  return path.startsWith("/") ? path : `${workDir}/${path}`;
}
