// `oz0 run` of an agent with runtime: harness:claude-agent-sdk on the real
// stack (events, LLM proxy, sandbox, orchestrator as processes): the scripted
// model reads a file, edits it and runs a command with Bash, which waits for
// a person's approval; the job succeeds and the proxy meters it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startScriptedModel, type ScriptedRequest, type ScriptedTurn } from "@oz0/harness/testing";
import { startEmbeddedStack } from "@oz0/orchestrator";
import { CUSTODY_KEY, PLANTED_SECRET } from "./harness-run.js";

const pluginDir = fileURLToPath(new URL("..", import.meta.url));
const repoRoot = path.resolve(pluginDir, "..", "..");
const cliMain = fileURLToPath(new URL(import.meta.resolve("@oz0/orchestrator"))).replace(/index\.js$/, "cli/main.js");

const CODER = `name: coder
description: Makes small changes and runs a command.
runtime: harness:claude-agent-sdk
model:
  primary: anthropic/claude-sonnet-4-5
instructions: prompts/coder.md
limits:
  max_steps: 10
  timeout: 10m
harness:
  tools: [Read, Edit, Bash]
  requires_approval: [Bash]
`;

function workingDirOf(request: ScriptedRequest): string {
  // Claude Code tells the model its working directory in the first message.
  const match = /Primary working directory: ([^\s\\]+)/.exec(JSON.stringify(request.body?.messages ?? []));
  return match?.[1] ?? "/nonexistent";
}

function turn(request: ScriptedRequest): ScriptedTurn {
  const messages = (request.body?.messages as { role: string }[] | undefined) ?? [];
  const wd = workingDirOf(request);
  switch (messages.filter((m) => m.role === "assistant").length) {
    case 0:
      return {
        text: "Reading the notes.",
        toolCalls: [{ name: "Read", input: { file_path: path.join(wd, "project", "notes.txt") } }],
      };
    case 1:
      return {
        toolCalls: [
          {
            name: "Edit",
            input: { file_path: path.join(wd, "project", "notes.txt"), old_string: "alpha", new_string: "beta" },
          },
        ],
      };
    case 2:
      return {
        toolCalls: [
          { name: "Bash", input: { command: "cat project/notes.txt > copy.txt", description: "Copy the notes" } },
        ],
      };
    default:
      return { text: "Notes edited and copied." };
  }
}

interface Cli {
  code: number;
  stdout: string;
  stderr: string;
}

void test("oz0 run: Read, Edit and an approved Bash call; the job succeeds, metered under its job and agent", async () => {
  // Under the repository, so the installed copy of this plugin finds its node_modules (see NEEDS.md).
  // The sandbox's isolation is its default (bubblewrap where it works).
  mkdirSync(path.join(repoRoot, ".oz0"), { recursive: true });
  const home = mkdtempSync(path.join(repoRoot, ".oz0", "harness-claude-e2e-"));
  const workspace = mkdtempSync(path.join(repoRoot, ".oz0", "harness-claude-e2e-files-"));
  const model = await startScriptedModel({ turns: turn });
  const providers = path.join(home, "providers.json");
  writeFileSync(
    providers,
    JSON.stringify({ providers: [{ name: "anthropic", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY" }] }),
  );
  const stack = await startEmbeddedStack({
    home,
    // The stack learns each service's URL from its "listening" info line.
    logLevel: "info",
    env: {
      "llm-proxy": { OZ0_PROVIDERS_FILE: providers },
      sandbox: { OZ0_CANCEL_GRACE_MS: "2000", ANTHROPIC_API_KEY: PLANTED_SECRET },
    },
  });
  const cli = (args: string[], input = ""): Promise<Cli> =>
    new Promise((resolve) => {
      const child = spawn(process.execPath, [cliMain, ...args], {
        env: {
          PATH: process.env["PATH"] ?? "",
          HOME: home,
          OZ0_URL: stack.urls.orchestrator,
          OZ0_HOME: home,
          OZ0_LOG_LEVEL: "warn",
          ANTHROPIC_API_KEY: PLANTED_SECRET,
        },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      child.stdin.end(input);
      child.on("exit", (code) => resolve({ code: code ?? 1, stdout, stderr }));
    });
  try {
    const secret = await cli(["secret", "set", "ANTHROPIC_API_KEY"], CUSTODY_KEY);
    assert.equal(secret.code, 0, secret.stderr);
    const harness = await cli(["plugin", "install", pluginDir]);
    assert.equal(harness.code, 0, harness.stderr);

    const agents = path.join(home, "agents-plugin");
    mkdirSync(path.join(agents, "agents"), { recursive: true });
    mkdirSync(path.join(agents, "prompts"));
    writeFileSync(
      path.join(agents, "oz0-plugin.yaml"),
      "name: coders\nversion: 0.1.0\nagents:\n  - agents/coder.yaml\n",
    );
    writeFileSync(path.join(agents, "agents", "coder.yaml"), CODER);
    writeFileSync(path.join(agents, "prompts", "coder.md"), "You make small, careful changes.\n");
    const installed = await cli(["plugin", "install", agents]);
    assert.equal(installed.code, 0, installed.stderr);

    // Outside the stack's data directory: nobody attaches from there.
    const project = path.join(workspace, "project");
    mkdirSync(project);
    writeFileSync(path.join(project, "notes.txt"), "alpha\n");
    // Attached as the folder `project` inside the session's working directory.
    const started = await cli(["run", "coder", "Edit the notes and copy them", "--attach", project, "--detach"]);
    assert.equal(started.code, 0, started.stderr);
    const jobId = started.stdout.trim();

    // Bash is in requires_approval: it waits for a person, who approves it.
    let callId = "";
    while (!callId) {
      const list = await cli(["approvals", "list", "--job", jobId, "--json"]);
      const first = list.stdout.split("\n").find((l) => l.trim());
      if (first) callId = String((JSON.parse(first) as { callId: string }).callId);
      else await new Promise((r) => setTimeout(r, 200));
    }
    const pending = await cli(["approvals", "list", "--job", jobId]);
    assert.match(pending.stdout, /Bash/);
    const approved = await cli(["approve", jobId, callId]);
    assert.equal(approved.code, 0, approved.stderr);

    const watched = await cli(["jobs", "watch", jobId]);
    assert.equal(watched.code, 0, `${watched.stdout}\n${watched.stderr}`);
    assert.match(watched.stdout, new RegExp(`job ${jobId} succeeded`));
    assert.match(watched.stdout, /▸ Read: Read .*notes\.txt/);
    assert.match(watched.stdout, /✓ Bash approved/);
    assert.doesNotMatch(watched.stdout, /✗/, "no tool call failed");
    // What the session changed, collected by the sandbox: the edit and the command's copy.
    const patchFile = /artifact: (\S+changes\.patch)/.exec(watched.stdout)?.[1];
    assert.ok(patchFile, watched.stdout);
    const patch = readFileSync(patchFile, "utf8");
    assert.match(patch, /^\+beta$/m);
    assert.match(patch, /copy\.txt/);

    // Metered at the proxy under the job and the agent.
    const metered = await cli(["usage", jobId, "--json"]);
    assert.equal(metered.code, 0, metered.stderr);
    const usage = JSON.parse(metered.stdout) as { total?: { calls?: string }; agents: { agent: string }[] };
    assert.equal(Number(usage.total?.calls), 4);
    assert.deepEqual(
      usage.agents.map((a) => a.agent),
      ["coder"],
    );

    // Upstream: four turns, the proxy's key, never the planted one.
    const turns = model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 4);
    for (const request of model.requests) {
      assert.equal(request.headers["x-api-key"], CUSTODY_KEY);
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false);
    }
  } finally {
    await stack.close();
    await model.close();
    if (!process.env["OZ0_KEEP_TEST_HOME"]) rmSync(home, { recursive: true, force: true });
    rmSync(workspace, { recursive: true, force: true });
  }
});
