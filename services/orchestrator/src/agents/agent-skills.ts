// Skills an agent version mounts: folders of its plugin holding a SKILL.md.
// The installed plugin is content-addressed and never changes, so a version
// that points at it pins the exact skill contents. Every session of the
// version sees the whole catalogue (SessionRequest.skills) — harness
// operations' scratch sessions included; nothing scopes a skill to one.
import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import type { Skill } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { parse } from "yaml";
import type { AgentVersionRecord } from "../store/job-store.js";
import { invalidArgument } from "../orchestrator-error.js";

export interface MountedSkill {
  name: string;
  description: string;
  /** Absolute path of the folder holding SKILL.md. */
  path: string;
}

/** A skill entry: a folder relative to the plugin, or { path }. */
function folderOf(entry: unknown): string | undefined {
  if (typeof entry === "string") return entry;
  if (entry && typeof entry === "object" && typeof (entry as { path?: unknown }).path === "string")
    return (entry as { path: string }).path;
  return undefined;
}

/** Front matter of SKILL.md (name, description); the folder's name when there is none. */
function readSkill(folder: string): MountedSkill {
  const text = readFileSync(path.join(folder, "SKILL.md"), "utf8");
  const match = /^---\r?\n([\s\S]*?)\r?\n---/.exec(text);
  let meta: { name?: unknown; description?: unknown } = {};
  if (match) {
    try {
      meta = (parse(match[1]!) as typeof meta | null) ?? {};
    } catch {
      meta = {};
    }
  }
  return {
    name: typeof meta.name === "string" && meta.name ? meta.name : path.basename(folder),
    description: typeof meta.description === "string" ? meta.description : "",
    path: folder,
  };
}

/** Resolves and checks an agent's skills in a plugin folder; throws invalid_argument naming the entry. */
export function resolveSkills(options: {
  skills: unknown[] | undefined;
  pluginDir: string;
  file: string;
}): MountedSkill[] {
  const seen = new Set<string>();
  return (options.skills ?? []).map((entry, index) => {
    const where = `${options.file}: field /skills/${index}`;
    const rel = folderOf(entry);
    if (!rel) throw invalidArgument(`${where}: expected a folder of the plugin holding SKILL.md (a path, or { path })`);
    const folder = path.resolve(options.pluginDir, rel);
    if (!folder.startsWith(options.pluginDir + path.sep))
      throw invalidArgument(`${where}: ${rel} is outside the plugin; list folders inside it`);
    if (!existsSync(folder) || !statSync(folder).isDirectory() || !existsSync(path.join(folder, "SKILL.md"))) {
      throw invalidArgument(`${where}: ${rel} is not a folder with a SKILL.md; create ${path.join(rel, "SKILL.md")}`);
    }
    const skill = readSkill(folder);
    if (seen.has(skill.name))
      throw invalidArgument(`${where}: a skill named "${skill.name}" is mounted twice; rename one`);
    seen.add(skill.name);
    return skill;
  });
}

/** The skill catalogue of an agent version, as SessionRequest.skills. */
export function sessionSkills(agent: AgentVersionRecord): Skill[] {
  let skills: MountedSkill[];
  try {
    skills = resolveSkills({
      skills: agent.definition.skills,
      pluginDir: agent.pluginPath,
      file: `${agent.name} v${agent.version}`,
    });
  } catch {
    // Publication checked them; a plugin folder removed since is the node's problem, not a reason to fail the session.
    skills = [];
  }
  return skills.map(
    (s) => ({ $typeName: "oz0.harness.v1.Skill", name: s.name, description: s.description, path: s.path }) as Skill,
  );
}
