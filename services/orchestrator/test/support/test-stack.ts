// The stack the orchestrator's tests drive: the four real services as child
// processes on loopback (the embedded stack's own code path), the LLM proxy's
// Anthropic and OpenAI routes pointed at a scripted model in the test process, and a
// helper that runs the `oz0` CLI as a user would.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startScriptedModel, type ScriptedModel, type ScriptedRequest, type ScriptedTurn } from "@oz0/harness/testing";
import {
  startEmbeddedStack,
  startServiceProcess,
  type EmbeddedStack,
  type StackProcess,
} from "../../src/dev/embedded-stack.js";

export { eventually } from "./eventually.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const packageDir = path.resolve(here, "..", "..");
export const repoRoot = path.resolve(packageDir, "..", "..");
export const cliMain = path.join(packageDir, "dist", "cli", "main.js");

const run = promisify(execFile);

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface TestStack {
  home: string;
  stack: EmbeddedStack;
  model: ScriptedModel;
  /** The orchestrator process, replaceable by restartOrchestrator. */
  orchestrator: StackProcess;
  url: string;
  cli(args: string[], options?: { input?: string; env?: Record<string, string> }): Promise<CliResult>;
  /** Start `oz0 …` and return the child, for commands that run long (watch). */
  spawnCli(args: string[]): ReturnType<typeof spawn>;
  /** SIGKILL the orchestrator and start a new one on the same data directory and port; `env` over the stack's. */
  restartOrchestrator(env?: Record<string, string>): Promise<void>;
  close(): Promise<void>;
}

/** The model's answer, chosen from the conversation so far: how many turns the assistant already took. */
export type TurnPicker = (options: { input: string; turn: number; request: ScriptedRequest }) => ScriptedTurn;

export function userInput(request: ScriptedRequest): string {
  const first = (request.body?.messages as { role: string; content: unknown }[] | undefined)?.[0];
  return typeof first?.content === "string" ? first.content : "";
}

export async function startTestStack(options: {
  pick: TurnPicker;
  sandboxEnv?: Record<string, string>;
  orchestratorEnv?: Record<string, string>;
  /** For the events service, for example KAFKA_BROKERS and OZ0_KAFKA_TOPIC. */
  eventsEnv?: Record<string, string>;
  /** Both providers' price tables (dollars per million tokens), for budgets; none by default. */
  prices?: Record<string, { input: number; output: number }>;
}): Promise<TestStack> {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-orch-test-"));
  const model = await startScriptedModel({
    isSideCall: () => false,
    turns: (request) => {
      const messages = (request.body?.messages as { role: string }[] | undefined) ?? [];
      return options.pick({
        input: userInput(request),
        turn: messages.filter((m) => m.role === "assistant").length,
        request,
      });
    },
  });
  const providersFile = path.join(home, "providers.json");
  // Both routes reach the scripted model, which answers each in its own wire format.
  writeFileSync(
    providersFile,
    JSON.stringify({
      providers: [
        { name: "anthropic", baseUrl: model.url, ...(options.prices ? { prices: options.prices } : {}) },
        { name: "openai", baseUrl: model.url, auth: "bearer", ...(options.prices ? { prices: options.prices } : {}) },
      ],
    }),
  );
  const stack = await startEmbeddedStack({
    home,
    logLevel: "info",
    // The harnesses and hooks of this package's tests (test/fixtures), which jobs run.
    sessionReadable: [path.join(packageDir, "test")],
    env: {
      "llm-proxy": { OZ0_PROVIDERS_FILE: providersFile },
      sandbox: { OZ0_CANCEL_GRACE_MS: "2000", ...options.sandboxEnv },
      orchestrator: { ...options.orchestratorEnv },
      events: { ...options.eventsEnv },
    },
  });
  let orchestrator = stack.processes.find((p) => p.name === "orchestrator")!;
  const url = stack.urls.orchestrator;
  const env = (extra: Record<string, string> = {}): NodeJS.ProcessEnv => ({
    ...process.env,
    OZ0_URL: url,
    OZ0_HOME: home,
    OZ0_LOG_LEVEL: "warn",
    ...extra,
  });
  const t: TestStack = {
    home,
    stack,
    model,
    get orchestrator() {
      return orchestrator;
    },
    url,
    async cli(args, opts = {}) {
      return new Promise((resolve) => {
        const child = spawn(process.execPath, [cliMain, ...args], {
          env: env(opts.env),
          stdio: ["pipe", "pipe", "pipe"],
        });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
        child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
        child.stdin.end(opts.input ?? "");
        child.on("exit", (code) => resolve({ code: code ?? 1, stdout, stderr }));
      });
    },
    spawnCli(args) {
      return spawn(process.execPath, [cliMain, ...args], { env: env(), stdio: ["ignore", "pipe", "pipe"] });
    },
    async restartOrchestrator(extraEnv = {}) {
      await orchestrator.stop({ signal: "SIGKILL" });
      const port = new URL(url).port;
      orchestrator = await startServiceProcess({
        name: "orchestrator",
        env: {
          ...stack.identityEnv("orchestrator"),
          ...options.orchestratorEnv,
          OZ0_HOME: home,
          OZ0_PORT: port,
          OZ0_SANDBOX_URLS: stack.urls.sandbox,
          OZ0_LLM_PROXY_URL: stack.urls["llm-proxy"],
          OZ0_EVENTS_URL: stack.urls.events,
          ...extraEnv,
        },
        logFile: path.join(home, "logs", "orchestrator.log"),
      });
    },
    async close() {
      await orchestrator.stop();
      await stack.close();
      await model.close();
      if (!process.env.OZ0_KEEP_TEST_HOME) rmSync(home, { recursive: true, force: true });
    },
  };
  return t;
}

/** The plugin repositories this test process made: removed when it exits, whatever its tests did. */
const pluginRepos: string[] = [];
process.once("exit", () => {
  for (const dir of pluginRepos) rmSync(dir, { recursive: true, force: true });
});

/** A plugin in a fresh git repository whose harness is the SDK's fake harness; returns the repository's path. */
export async function makePluginRepo(options: {
  agents: Record<string, string>;
  name?: string;
  version?: string;
  prompts?: Record<string, string>;
}): Promise<string> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-plugin-repo-"));
  pluginRepos.push(dir);
  mkdirSync(path.join(dir, "agents"));
  mkdirSync(path.join(dir, "prompts"));
  writeFileSync(
    path.join(dir, "prompts", "fixer.md"),
    "You fix failing tests. Read the code, change it, run the tests.\n",
  );
  for (const [name, text] of Object.entries(options.prompts ?? {}))
    writeFileSync(path.join(dir, "prompts", name), text);
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    [
      `name: ${options.name ?? "testing"}`,
      `version: ${options.version ?? "0.1.0"}`,
      "harnesses:",
      "  - name: fake",
      '    command: ["oz0-fake-harness"]',
      "    permissions: true",
      "    capabilities: [permissions]",
      "    tools: [read_file, write_file, run_command]",
      "agents:",
      ...Object.keys(options.agents).map((name) => `  - agents/${name}.yaml`),
      "",
    ].join("\n"),
  );
  for (const [name, yaml] of Object.entries(options.agents))
    writeFileSync(path.join(dir, "agents", `${name}.yaml`), yaml);
  await commitAll(dir, "plugin");
  return dir;
}

/** What sets a test agent on the fake harness apart; fakeAgentYaml writes the rest. */
export interface FakeAgentOptions {
  name: string;
  description?: string;
  /** The prompt file, relative to the plugin; makePluginRepo writes prompts/fixer.md. */
  instructions?: string;
  /** harness.tools; "harness-defaults" leaves it unset, so the agent gets the tools its harness declares. */
  tools?: readonly string[] | "harness-defaults";
  /** harness.requires_approval: the tools whose every call waits for a person. */
  requiresApproval?: readonly string[];
  limits?: { maxSteps?: number; timeout?: string };
  /** More top-level YAML, appended as it is (an `approvals:` or `hooks:` block), ending in a newline. */
  extra?: string;
}

/**
 * The YAML of a test agent that runs on its plugin's `fake` harness (the one
 * makePluginRepo's manifest declares), so that each test states only what sets
 * its agent apart instead of writing the whole file again.
 */
export function fakeAgentYaml(options: FakeAgentOptions): string {
  const tools = options.tools ?? ["read_file", "write_file", "run_command"];
  const list = (items: readonly string[]) => `[${items.join(", ")}]`;
  const harness = [
    ...(tools === "harness-defaults" ? [] : [`  tools: ${list(tools)}`]),
    ...(options.requiresApproval ? [`  requires_approval: ${list(options.requiresApproval)}`] : []),
  ];
  const limits = [
    ...(options.limits?.maxSteps !== undefined ? [`  max_steps: ${options.limits.maxSteps}`] : []),
    ...(options.limits?.timeout !== undefined ? [`  timeout: ${options.limits.timeout}`] : []),
  ];
  const lines = [
    `name: ${options.name}`,
    ...(options.description !== undefined ? [`description: ${options.description}`] : []),
    "runtime: harness:fake",
    "model:",
    "  primary: anthropic/claude-sonnet-5-5",
    `instructions: ${options.instructions ?? "prompts/fixer.md"}`,
    ...(limits.length > 0 ? ["limits:", ...limits] : []),
    ...(harness.length > 0 ? ["harness:", ...harness] : []),
  ];
  return `${lines.join("\n")}\n${options.extra ?? ""}`;
}

export async function commitAll(dir: string, message: string): Promise<void> {
  const git = (...args: string[]) =>
    run("git", args, {
      cwd: dir,
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: "t",
        GIT_AUTHOR_EMAIL: "t@t",
        GIT_COMMITTER_NAME: "t",
        GIT_COMMITTER_EMAIL: "t@t",
      },
    });
  await git("init", "-q", "-b", "main").catch(() => undefined);
  await git("add", "-A");
  await git("commit", "-q", "-m", message);
}

/**
 * Installs a plugin whose one harness, `name`, runs `node script` (a raw-protocol rogue of test/fixtures) with
 * permissions on and run_command offered, and one agent, also `name`, on it; the repository is removed at exit.
 */
export async function installRoguePlugin(t: TestStack, options: { name: string; script: string }): Promise<void> {
  const { name, script } = options;
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-rogue-plugin-"));
  pluginRepos.push(dir);
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(dir, sub));
  writeFileSync(path.join(dir, "prompts", "fixer.md"), "Do as you are told.\n");
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    `name: ${name}s\nversion: 0.1.0\nharnesses:\n  - name: ${name}\n    command: ["node", "${script}"]\n    permissions: true\n    tools: [run_command]\nagents:\n  - agents/${name}.yaml\n`,
  );
  writeFileSync(
    path.join(dir, "agents", `${name}.yaml`),
    fakeAgentYaml({ name, tools: ["run_command"] }).replace("harness:fake", `harness:${name}`),
  );
  await installPlugin(t, dir);
}

/** Commits the plugin in `dir` and installs it on the stack, as `oz0 plugin install file://DIR` does. */
export async function installPlugin(t: TestStack, dir: string): Promise<void> {
  await commitAll(dir, "plugin");
  const installed = await t.cli(["plugin", "install", `file://${dir}`]);
  assert.equal(installed.code, 0, `${installed.stdout}${installed.stderr}`);
}
