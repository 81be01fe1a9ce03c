// Human titles for tool calls, shown to the person asked to approve one.
function text(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

function shorten(value: string, max = 120): string {
  const line = value.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** For example `Run npm test` for Bash or `Edit src/a.ts` for Edit. */
export function toolTitle(tool: string, input: Record<string, unknown>): string {
  const file = text(input["file_path"]) ?? text(input["path"]);
  switch (tool) {
    case "Bash": {
      const command = text(input["command"]);
      return command ? `Run ${shorten(command)}` : "Run a command";
    }
    case "Read":
      return file ? `Read ${file}` : "Read a file";
    case "Write":
      return file ? `Write ${file}` : "Write a file";
    case "Edit":
      return file ? `Edit ${file}` : "Edit a file";
    case "Glob": {
      const pattern = text(input["pattern"]);
      return pattern ? `Find files matching ${shorten(pattern)}` : "Find files";
    }
    case "Grep": {
      const pattern = text(input["pattern"]);
      return pattern ? `Search files for ${shorten(pattern)}` : "Search files";
    }
    default:
      return `Use ${tool}`;
  }
}
