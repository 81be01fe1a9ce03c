// A small Dockerfile reader: stages, their instructions (continuation lines
// joined, comments dropped) and the chain of stages a target builds on.
import { readFileSync } from "node:fs";

export interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

export interface Stage {
  name: string;
  from: string;
  instructions: Instruction[];
}

export interface Dockerfile {
  args: Record<string, string>;
  stages: Stage[];
}

export function readDockerfile(file: string): Dockerfile {
  const lines = readFileSync(file, "utf8").split("\n");
  const instructions: Instruction[] = [];
  let buffer = "";
  let start = 0;
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (buffer === "" && (line === "" || line.startsWith("#"))) return;
    if (buffer !== "" && line.startsWith("#")) return;
    if (buffer === "") start = i + 1;
    if (line.endsWith("\\")) {
      buffer += `${line.slice(0, -1)} `;
      return;
    }
    buffer += line;
    const m = /^(\w+)\s+([\s\S]*)$/.exec(buffer);
    if (m) instructions.push({ keyword: m[1]!.toUpperCase(), args: m[2]!.replace(/\s+/g, " ").trim(), line: start });
    buffer = "";
  });
  const result: Dockerfile = { args: {}, stages: [] };
  for (const ins of instructions) {
    if (ins.keyword === "FROM") {
      const m = /^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args);
      if (!m) throw new Error(`line ${ins.line}: cannot read FROM ${ins.args}`);
      result.stages.push({ from: m[1]!, name: m[2] ?? `#${result.stages.length}`, instructions: [] });
    } else if (result.stages.length === 0) {
      if (ins.keyword === "ARG") {
        const [k, v] = ins.args.split("=", 2);
        result.args[k!] = v ?? "";
      }
    } else {
      result.stages.at(-1)!.instructions.push(ins);
    }
  }
  return result;
}

/** The stage and the stages it is built FROM, nearest first. */
export function chain(file: Dockerfile, target: string): Stage[] {
  const out: Stage[] = [];
  let name: string | undefined = target;
  while (name) {
    const stage = file.stages.find((s) => s.name === name);
    if (!stage) break;
    out.push(stage);
    name = stage.from;
  }
  return out;
}

/** The instructions a target's final image inherits (base stages first). */
export function inherited(file: Dockerfile, target: string): Instruction[] {
  return chain(file, target)
    .reverse()
    .flatMap((s) => s.instructions);
}
