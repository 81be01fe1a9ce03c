// Plugins: a folder or git repository with oz0-plugin.yaml. Installing copies
// (or clones) it into the data directory under a content-addressed folder, so
// an installed copy never changes under an agent version that points at it;
// then validates the manifest and every agent against the published schemas,
// registers the plugin and publishes its agents.
import { execFile } from "node:child_process";
import { createHash, randomUUID } from "node:crypto";
import {
  chmodSync,
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  type Stats,
} from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { AgentVersions } from "../agents/agent-versions.js";
import { resolveSkills } from "../agents/agent-skills.js";
import type { GraphRegistry, GraphVersionRecord } from "../graphs/graph-registry.js";
import { harnessFingerprint, type FingerprintedHarness } from "../agents/harness-fingerprint.js";
import { validateHarnessOperations } from "../operations/harness-operations.js";
import type { AgentVersionRecord, JobStore, PluginRecord, ResolvedHarness } from "../store/job-store.js";
import { invalidArgument, notFound, OrchestratorError } from "../orchestrator-error.js";
import { isCommandHook, type HookSpec } from "../policy/hook-rules.js";
import { checkHooks, checkToolPolicy } from "../policy/policy-checks.js";
import { unboundedAgentWarnings } from "../policy/session-budget.js";
import type { AgentDefinition, HarnessManifest, PluginManifest } from "./plugin-types.js";
import { readYamlDocument } from "./yaml-validation.js";

const run = promisify(execFile);

export const MANIFEST_FILE = "oz0-plugin.yaml";

export interface InstallResult {
  plugin: PluginRecord;
  /** With why each was published ("first version", "harness fake's command file harness.mjs changed"). */
  published: (AgentVersionRecord & { reasons: string[] })[];
  /** Graph versions this install published (`graphs:` in the manifest). */
  publishedGraphs: GraphVersionRecord[];
  /** What the operator should know of what was published (an agent no budget bounds), each with what to do. */
  warnings: string[];
}

function isGitSource(source: string): boolean {
  return /^(https?|git|ssh|file):\/\//.test(source) || /^[\w.-]+@[\w.-]+:/.test(source) || source.endsWith(".git");
}

/** The harness plugins this repository ships, by harness name: a newcomer installing an example first is told which. */
export const SHIPPED_HARNESSES: Readonly<Record<string, string>> = {
  "claude-agent-sdk": "plugins/harness-claude",
  acp: "plugins/harness-acp",
};

/**
 * A plugin's source as it is kept and shown: a URL without the user and password before its host. A private
 * repository is often installed as `https://x-access-token:…@github.com/org/plugin.git` (or a token as the user
 * alone); kept as given, ListPlugins showed the admin's git credential to every viewer. The clone uses the URL
 * as given; nothing fetches from the kept source again.
 */
export function sourceWithoutCredentials(source: string): string {
  // Up to the last `@` before the path: a password may hold an `@` of its own.
  return source.replace(/^([a-z][a-z0-9+.-]*:\/\/)[^/?#]*@/i, "$1");
}

/**
 * An HTTP(S) URL's user and password taken out of what git is run with, and handed to it as a credential helper
 * that reads them from git's environment. On git's command line (and git-remote-http's, to which git passes the
 * URL) they were in /proc/<pid>/cmdline while the clone ran, every local user's to read, and every session's of a
 * `user`- or `none`-mode sandbox on the host (attacker review); a process's environment is its own user's alone.
 * The helper list is emptied first, so the URL's credential is the one used, as it was, and no helper of the
 * orchestrator's user stores it. A user without a password (a token given as the user) is sent with an empty one.
 * It answers for the URL's own protocol and host (with its port) alone: git asks it again for the host a clone is
 * redirected to, and a repository that redirected elsewhere was sent the credential there.
 */
export function credentialsOutOfCommandLine(source: string): { url: string; env: Record<string, string> } {
  const match = /^(https?):\/\/([^/?#]*)@([^/?#]*)/i.exec(source);
  if (!match) return { url: source, env: {} };
  const userinfo = match[2]!;
  const colon = userinfo.indexOf(":");
  const decode = (text: string): string => {
    try {
      return decodeURIComponent(text);
    } catch {
      return text;
    }
  };
  const first = Number(process.env.GIT_CONFIG_COUNT) || 0;
  return {
    url: sourceWithoutCredentials(source),
    env: {
      OZ0_GIT_USERNAME: decode(colon === -1 ? userinfo : userinfo.slice(0, colon)),
      OZ0_GIT_PASSWORD: decode(colon === -1 ? "" : userinfo.slice(colon + 1)),
      // As git asks: both as the URL writes them.
      OZ0_GIT_PROTOCOL: match[1]!,
      OZ0_GIT_HOST: match[3]!,
      GIT_CONFIG_COUNT: String(first + 2),
      [`GIT_CONFIG_KEY_${first}`]: "credential.helper",
      [`GIT_CONFIG_VALUE_${first}`]: "",
      [`GIT_CONFIG_KEY_${first + 1}`]: "credential.helper",
      [`GIT_CONFIG_VALUE_${first + 1}`]:
        '!f() { test "$1" = get || return 0; while IFS= read -r l; do case "$l" in protocol=*) p="${l#protocol=}";; host=*) h="${l#host=}";; esac; done; test "$p" = "$OZ0_GIT_PROTOCOL" && test "$h" = "$OZ0_GIT_HOST" || return 0; printf \'username=%s\\npassword=%s\\n\' "$OZ0_GIT_USERNAME" "$OZ0_GIT_PASSWORD"; }; f',
    },
  };
}

/**
 * Refuses a plugin with a symbolic link that leads outside its folder: an absolute target, or a relative one
 * that climbs out. The orchestrator reads a plugin's instructions, graphs and modules in its own process, and a
 * path check on the link's own name passes while the read follows the link: a plugin could make its
 * instructions the owner's credential (`../../../../credentials/owner`) or any file the orchestrator can read,
 * and have it shown by `oz0 agents show` and sent to its harness and the model. Links inside the folder stay.
 */
function refuseEscapingLinks(root: string): void {
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (entry.name === ".git") continue;
      const full = path.join(dir, entry.name);
      if (entry.isSymbolicLink()) {
        const target = readlinkSync(full);
        const resolved = path.resolve(dir, target);
        if (path.isAbsolute(target) || !resolved.startsWith(root + path.sep))
          throw invalidArgument(
            `${path.relative(root, full)}: a symbolic link to ${target}, outside the plugin; a plugin's links must lead to files inside its folder`,
          );
      } else if (entry.isDirectory()) walk(full);
    }
  };
  walk(root);
}

/**
 * Makes a plugin's copy readable by every user (`chmod -R a+rX,go-w`, links left as they are): a sandbox running as
 * root runs each session under a uid of its own, which reads the plugin's folder as any other user of the node
 * does, and a copy of a folder made 0700 (mkdtemp, a umask of 077) would be refused. No mode is part of the copy's
 * hash. The folders above it, up to the data directory, are passable and not listable (passableToSessions).
 */
function openToSessions(root: string): void {
  const open = (file: string, stats: Stats): void => {
    const execute = stats.isDirectory() || (stats.mode & 0o100) !== 0 ? 0o111 : 0;
    const mode = ((stats.mode & 0o7777) | 0o444 | execute) & ~0o022;
    if (mode !== (stats.mode & 0o7777)) chmodSync(file, mode);
  };
  const walk = (dir: string): void => {
    open(dir, lstatSync(dir));
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.isFile()) open(full, lstatSync(full));
    }
  };
  walk(root);
}

/**
 * Lets other users pass through `dirs` (o+x) without listing them: in the `user` mode a session's uid reaches its
 * plugin's copy by its path, not under a bind as under bubblewrap, through `<home>/plugins/<name>` (made 0700 by the
 * services' umask). It learns no other plugin's path from them.
 */
function passableToSessions(dirs: readonly string[]): void {
  for (const dir of dirs) {
    const mode = statSync(dir).mode & 0o7777;
    if ((mode & 0o111) !== 0o111) chmodSync(dir, mode | 0o111);
  }
}

/** sha256 over every file's relative path and content, and every link's target (the .git folder excluded). */
function hashTree(root: string): string {
  const hash = createHash("sha256");
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      if (entry.name === ".git" || entry.name === "node_modules") continue;
      const full = path.join(dir, entry.name);
      const rel = path.relative(root, full);
      if (entry.isDirectory()) walk(full);
      else if (entry.isSymbolicLink()) hash.update(`${rel}\0->${readlinkSync(full)}\0`);
      else if (entry.isFile()) {
        hash.update(`${rel}\0`);
        hash.update(readFileSync(full));
        hash.update("\0");
      }
    }
  };
  walk(root);
  return hash.digest("hex");
}

/**
 * A plugin's definition files, relative to its folder: the manifest, its
 * agents and graphs and the agents' instructions. They are hashed with each
 * agent (its definition and instructions), not with the plugin's harnesses.
 */
function definitionFiles(root: string, manifest: PluginManifest, instructions?: string[]): string[] {
  const rel = (file: string): string => path.relative(root, path.resolve(root, file)).split(path.sep).join("/");
  let prompts = instructions;
  if (!prompts) {
    prompts = [];
    for (const file of manifest.agents ?? []) {
      try {
        prompts.push(
          readYamlDocument<AgentDefinition>({ schema: "agent", file: path.resolve(root, file), displayName: file })
            .instructions,
        );
      } catch {
        // An installed copy's agents were valid when it was installed; one that no longer reads is simply not set apart.
      }
    }
  }
  return [MANIFEST_FILE, ...(manifest.agents ?? []), ...(manifest.graphs ?? []), ...prompts].map(rel);
}

/**
 * A plugin copied from a folder keeps resolving its JavaScript dependencies
 * where the folder did: its copy gets a `node_modules` link to the nearest
 * node_modules at or above the source (a workspace's hoisted one included).
 * Installing the same content again from another folder (a second checkout,
 * the first one deleted) points the link there: the copy is shared by
 * content, and the latest install says where its dependencies are, for every
 * copy of the plugin (an older one an agent version still runs too). A copy
 * that brought a node_modules folder of its own keeps it. Plugins cloned from
 * git bring no dependencies.
 */
function linkDependencies(source: string, copy: string): void {
  if (isGitSource(source)) return;
  const link = path.join(copy, "node_modules");
  const current = lstatSync(link, { throwIfNoEntry: false });
  if (current && !current.isSymbolicLink()) return;
  let dir = path.resolve(source);
  for (;;) {
    const candidate = path.join(dir, "node_modules");
    if (existsSync(candidate)) {
      if (current && readlinkSync(link) === candidate) return;
      // Replaced by a rename, so a session starting meanwhile finds the old link or the new one, never none.
      const fresh = `${link}.${randomUUID()}`;
      symlinkSync(candidate, fresh, "dir");
      renameSync(fresh, link);
      return;
    }
    const parent = path.dirname(dir);
    if (parent === dir) return;
    dir = parent;
  }
}

export class PluginRegistry {
  readonly #store: JobStore;
  readonly #pluginsDir: string;
  readonly #agents: AgentVersions;
  readonly #graphs: GraphRegistry | undefined;
  readonly #defaultBudgetUsd: number | undefined;

  constructor(options: {
    store: JobStore;
    home: string;
    graphs?: GraphRegistry;
    /** The budget of sessions whose agent sets none (OZ0_DEFAULT_MAX_BUDGET_USD): without it, an install warns of such agents. */
    defaultBudgetUsd?: number;
  }) {
    this.#store = options.store;
    this.#defaultBudgetUsd = options.defaultBudgetUsd;
    this.#graphs = options.graphs;
    this.#pluginsDir = path.join(options.home, "plugins");
    this.#agents = new AgentVersions({ store: options.store });
  }

  /**
   * `allowHostHooks`: the admin trusts the plugin's command hooks, which run on this host as the orchestrator;
   * without it a plugin that declares one is refused.
   */
  async install(options: { source: string; allowHostHooks?: boolean }): Promise<InstallResult> {
    const source = options.source.trim();
    if (!source)
      throw invalidArgument("no plugin source given: pass a git URL or a directory that holds oz0-plugin.yaml");
    const staging = path.join(this.#pluginsDir, ".staging", randomUUID());
    mkdirSync(path.dirname(staging), { recursive: true });
    try {
      await this.#fetch(source, staging);
      refuseEscapingLinks(staging);
      const manifest = readYamlDocument<PluginManifest>({
        schema: "plugin-manifest",
        file: path.join(staging, MANIFEST_FILE),
        displayName: MANIFEST_FILE,
      });
      // Validate every agent before anything is registered: an install is all or nothing.
      const agents = this.#readAgents(staging, manifest);
      checkHooks((manifest.hooks ?? []) as unknown as HookSpec[], MANIFEST_FILE);
      if (!options.allowHostHooks) refuseHostHooks(manifest, agents);
      const finalDir = path.join(this.#pluginsDir, manifest.name, hashTree(staging).slice(0, 16));
      if (existsSync(finalDir)) {
        rmSync(staging, { recursive: true, force: true });
      } else {
        mkdirSync(path.dirname(finalDir), { recursive: true });
        rmSync(path.join(staging, ".git"), { recursive: true, force: true });
        renameSync(staging, finalDir);
      }
      // Also a copy an earlier version installed, which kept its source's modes.
      openToSessions(finalDir);
      passableToSessions([this.#pluginsDir, path.dirname(finalDir)]);
      // Every copy of this plugin uses the dependencies of the source installed last, the older ones too: an agent
      // version whose harness did not change keeps running its copy, and a stack binds its own installation's
      // node_modules into sessions, not the one another checkout installed that copy from (the demo, run from a
      // second checkout with the same home, failed: "Cannot find package '@oz0/harness'").
      for (const copy of readdirSync(path.dirname(finalDir), { withFileTypes: true }))
        if (copy.isDirectory()) linkDependencies(source, path.join(path.dirname(finalDir), copy.name));
      const harnesses = new Map<string, FingerprintedHarness>();
      const ownDefinitions = definitionFiles(
        finalDir,
        manifest,
        agents.map((a) => a.definition.instructions),
      );
      for (const h of manifest.harnesses ?? []) {
        const harness: ResolvedHarness = { plugin: manifest.name, pluginPath: finalDir, manifest: h };
        harnesses.set(h.name, {
          ...harness,
          fingerprint: harnessFingerprint({ harness, definitionFiles: ownDefinitions }),
        });
      }
      const resolved: { agent: (typeof agents)[number]; harness: FingerprintedHarness }[] = [];
      for (const agent of agents) {
        const harness = await this.#resolveHarness(agent.definition, agent.file, harnesses);
        // Operation keys share the session's tool namespace with the harness's tools.
        validateHarnessOperations({
          operations: agent.definition.harness_operations,
          toolNamespace: agent.definition.harness?.tools ?? harness.manifest.tools ?? [],
          file: agent.file,
        });
        resolveSkills({ skills: agent.definition.skills, pluginDir: finalDir, file: agent.file });
        checkToolPolicy({ definition: agent.definition, harness: harness.manifest, file: agent.file });
        resolved.push({ agent, harness });
      }
      // Agents and graphs share one name space, and RunAgent runs the graph of a name first: an agent named
      // like an installed graph was published but never ran (`oz0 run NAME` ran the graph). The graph's side
      // of the rule is in GraphRegistry.prepare.
      for (const { agent } of resolved) {
        if (await this.#graphs?.findVersion(agent.definition.name))
          throw invalidArgument(
            `${agent.file}: field /name: "${agent.definition.name}" is already a graph; agents and graphs share one name space, so rename the agent`,
          );
      }
      // Graphs are validated against this plugin's agents and the installed ones, before anything is registered.
      if ((manifest.graphs ?? []).length > 0 && !this.#graphs)
        throw invalidArgument(`${MANIFEST_FILE}: field /graphs: this orchestrator runs no graphs`);
      const graphs = this.#graphs
        ? await this.#graphs.prepare({
            root: finalDir,
            files: manifest.graphs ?? [],
            pluginAgents: agents.map((a) => a.definition.name),
          })
        : [];
      const record: PluginRecord = {
        name: manifest.name,
        version: manifest.version,
        description: manifest.description ?? "",
        source: sourceWithoutCredentials(source),
        path: finalDir,
        manifest,
        installedAt: new Date(),
      };
      await this.#store.putPlugin(record);
      const published: InstallResult["published"] = [];
      for (const { agent, harness } of resolved) {
        const result = await this.#agents.publish({
          definition: agent.definition,
          instructions: agent.instructions,
          plugin: manifest.name,
          pluginVersion: manifest.version,
          pluginPath: finalDir,
          harness,
        });
        if (result.published) published.push({ ...result.record, reasons: result.reasons });
      }
      const publishedGraphs: GraphVersionRecord[] = [];
      for (const graph of graphs) {
        const result = await this.#graphs!.publishVersion({
          graph,
          plugin: manifest.name,
          pluginVersion: manifest.version,
          pluginPath: finalDir,
        });
        if (result.published) publishedGraphs.push(result.record);
      }
      return {
        plugin: record,
        published,
        publishedGraphs,
        warnings: unboundedAgentWarnings(published, this.#defaultBudgetUsd),
      };
    } finally {
      rmSync(staging, { recursive: true, force: true });
    }
  }

  async #fetch(source: string, into: string): Promise<void> {
    const local = path.resolve(source);
    if (!isGitSource(source) && existsSync(local) && statSync(local).isDirectory()) {
      if (!existsSync(path.join(local, MANIFEST_FILE))) {
        throw notFound(
          `plugin not found: ${source} has no ${MANIFEST_FILE}; point at the plugin's folder or git repository`,
        );
      }
      // Links as they are (cpSync makes relative ones absolute, into the source), checked by refuseEscapingLinks.
      cpSync(local, into, {
        recursive: true,
        verbatimSymlinks: true,
        filter: (src) => !/[\\/](\.git|node_modules)$/.test(src),
      });
      return;
    }
    if (!isGitSource(source)) {
      throw notFound(
        `plugin not found: ${source} is neither a directory nor a git URL; pass a path to the plugin folder or a git URL`,
      );
    }
    try {
      const { url, env } = credentialsOutOfCommandLine(source);
      await run("git", ["clone", "--quiet", "--depth", "1", url, into], {
        timeout: 120_000,
        env: { ...process.env, ...env, GIT_TERMINAL_PROMPT: "0" },
      });
    } catch (error) {
      const stderr = (error as { stderr?: string }).stderr?.trim().split("\n").pop() ?? "";
      throw new OrchestratorError(
        "not_found",
        `plugin not found: git clone ${sourceWithoutCredentials(source)} failed${stderr ? ` (${stderr})` : ""}; check the URL and your access`,
      );
    }
    if (!existsSync(path.join(into, MANIFEST_FILE))) {
      throw notFound(
        `plugin not found: the repository ${sourceWithoutCredentials(source)} has no ${MANIFEST_FILE} at its root`,
      );
    }
  }

  #readAgents(
    root: string,
    manifest: PluginManifest,
  ): { file: string; definition: AgentDefinition; instructions: string }[] {
    const seen = new Set<string>();
    return (manifest.agents ?? []).map((rel) => {
      const file = path.resolve(root, rel);
      if (!file.startsWith(root + path.sep))
        throw invalidArgument(`${MANIFEST_FILE}: field /agents: ${rel} is outside the plugin; list files inside it`);
      const definition = readYamlDocument<AgentDefinition>({ schema: "agent", file, displayName: rel });
      if (seen.has(definition.name))
        throw invalidArgument(
          `${rel}: field /name: agent "${definition.name}" is defined twice in this plugin; rename one`,
        );
      seen.add(definition.name);
      const instructionsFile = path.resolve(root, definition.instructions);
      if (!instructionsFile.startsWith(root + path.sep) || !existsSync(instructionsFile)) {
        throw invalidArgument(
          `${rel}: field /instructions: expected a file in the plugin (a path relative to the plugin's folder); ${JSON.stringify(definition.instructions)} does not exist (instructions name a file, such as prompts/notes.md, not the text itself)`,
        );
      }
      return { file: rel, definition, instructions: readFileSync(instructionsFile, "utf8") };
    });
  }

  async #resolveHarness(
    definition: AgentDefinition,
    file: string,
    own: Map<string, FingerprintedHarness>,
  ): Promise<FingerprintedHarness> {
    const name = definition.runtime.slice("harness:".length);
    const local = own.get(name);
    if (local) return local;
    for (const plugin of await this.#store.listPlugins()) {
      const h = plugin.manifest.harnesses?.find((x: HarnessManifest) => x.name === name);
      if (h) {
        const harness: ResolvedHarness = { plugin: plugin.name, pluginPath: plugin.path, manifest: h };
        return {
          ...harness,
          fingerprint: harnessFingerprint({ harness, definitionFiles: definitionFiles(plugin.path, plugin.manifest) }),
        };
      }
    }
    const shipped = SHIPPED_HARNESSES[name];
    throw invalidArgument(
      `${file}: field /runtime: no installed plugin declares harness "${name}"; install the plugin that provides it first${shipped ? ` (the suite ships it: oz0 plugin install ${shipped}, from a checkout of Orchestrator Zero)` : ""}`,
    );
  }

  list(): Promise<PluginRecord[]> {
    return this.#store.listPlugins();
  }
}

/**
 * A command hook is a program of the plugin that the orchestrator runs on its
 * own host, as itself: it can read the orchestrator's data directory (the
 * owner's credential among it) and reach its network. An admin says so when
 * installing (`--allow-host-hooks`); otherwise the plugin is refused, naming
 * its command hooks.
 */
function refuseHostHooks(
  manifest: PluginManifest,
  agents: readonly { file: string; definition: { hooks?: unknown } }[],
): void {
  const named = (hooks: unknown, file: string): string[] =>
    ((hooks ?? []) as unknown as HookSpec[]).flatMap((hook, index) =>
      isCommandHook(hook) ? [`${hook.name ?? `hook ${index}`} (${file})`] : [],
    );
  const found = [
    ...named(manifest.hooks, MANIFEST_FILE),
    ...agents.flatMap((agent) => named(agent.definition.hooks, agent.file)),
  ];
  if (found.length === 0) return;
  throw invalidArgument(
    `plugin ${manifest.name} declares command hooks, ${found.join(", ")}: they run on the orchestrator's host, with its network, and as the orchestrator with its files (its credentials among them) unless bubblewrap or Landlock isolates them (OZ0_HOOK_ISOLATION); install it with --allow-host-hooks (InstallPluginRequest.allow_host_hooks) only if you trust its code`,
  );
}
