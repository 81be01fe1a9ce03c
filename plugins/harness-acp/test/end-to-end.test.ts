// `oz0 run` of an agent with runtime: harness:acp and claude-agent-acp on the
// real stack (events, LLM proxy, sandbox, orchestrator as processes): the
// scripted model runs a command with Bash, which is under requires_approval
// and waits for a person's approval; the job succeeds and the proxy meters it.
// A second job's Read outside the working directory is refused, and that job
// succeeds too (the harness asked before refusing it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startScriptedModel } from "@oz0/harness/testing";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { startEmbeddedStack } from "@oz0/orchestrator";
import { PLANTED_SECRET } from "./harness-run.js";

const pluginDir = fileURLToPath(new URL("..", import.meta.url));
const repoRoot = path.resolve(pluginDir, "..", "..");
const cliMain = createRequire(import.meta.url)
  .resolve("@oz0/orchestrator")
  .replace(/index\.js$/, "cli/main.js");
const CUSTODY_KEY = "sk-ant-api03-CUSTODY-key-held-by-the-proxy-only-e2e-acp";

const CODER = `name: coder
description: Runs a command through an ACP agent.
runtime: harness:acp
model:
  primary: anthropic/claude-sonnet-4-5
instructions: prompts/coder.md
limits:
  max_steps: 10
  timeout: 10m
harness:
  agent: claude
  tools: [Read, Bash]
  requires_approval: [Bash]
`;

/** The second job's input: the model reads a file outside the working directory, which the harness refuses. */
const OUTSIDE_INPUT = "Read the host name";

function turn(request: ScriptedRequest): ScriptedTurn {
  const messages = (request.body?.messages as { role: string }[] | undefined) ?? [];
  const outside = JSON.stringify(messages[0] ?? "").includes(OUTSIDE_INPUT);
  if (messages.some((m) => m.role === "assistant"))
    return { text: outside ? "It is outside my working directory." : "Greeting written." };
  if (outside) return { toolCalls: [{ name: "Read", input: { file_path: "/etc/hostname" } }] };
  return {
    text: "Writing it.",
    toolCalls: [
      { name: "Bash", input: { command: "echo hello from acp > greeting.txt", description: "Write the greeting" } },
    ],
  };
}

interface Cli {
  code: number;
  stdout: string;
  stderr: string;
}

void test("oz0 run with harness:acp: Bash under requires_approval runs after approval and the job succeeds, metered under its job and agent; a Read outside is refused, not a policy bypass", async () => {
  // Under the repository, so the installed copy of this plugin finds its node_modules
  // (plugins/harness-claude/NEEDS.md).
  mkdirSync(path.join(repoRoot, ".oz0"), { recursive: true });
  const home = mkdtempSync(path.join(repoRoot, ".oz0", "harness-acp-e2e-"));
  const model = await startScriptedModel({ turns: turn });
  const providers = path.join(home, "providers.json");
  writeFileSync(
    providers,
    JSON.stringify({ providers: [{ name: "anthropic", baseUrl: model.url, keySecret: "ANTHROPIC_API_KEY" }] }),
  );
  const stack = await startEmbeddedStack({
    home,
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
    assert.equal((await cli(["secret", "set", "ANTHROPIC_API_KEY"], CUSTODY_KEY)).code, 0);
    const harness = await cli(["plugin", "install", pluginDir]);
    assert.equal(harness.code, 0, harness.stderr);

    const agents = path.join(home, "agents-plugin");
    mkdirSync(path.join(agents, "agents"), { recursive: true });
    mkdirSync(path.join(agents, "prompts"));
    writeFileSync(
      path.join(agents, "oz0-plugin.yaml"),
      "name: acp-coders\nversion: 0.1.0\nagents:\n  - agents/coder.yaml\n",
    );
    writeFileSync(path.join(agents, "agents", "coder.yaml"), CODER);
    writeFileSync(path.join(agents, "prompts", "coder.md"), "You run one command.\n");
    const installed = await cli(["plugin", "install", agents]);
    assert.equal(installed.code, 0, installed.stderr);

    const started = await cli(["run", "coder", "Write a greeting", "--detach"]);
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
    assert.match(watched.stdout, /✓ Bash approved/);
    assert.doesNotMatch(watched.stdout, /✗/, "no tool call failed");
    // What the session changed, collected by the sandbox: the command's file.
    const patchFile = /artifact: (\S+changes\.patch)/.exec(watched.stdout)?.[1];
    assert.ok(patchFile, watched.stdout);
    assert.match(readFileSync(patchFile, "utf8"), /^\+hello from acp$/m);

    const metered = await cli(["usage", jobId, "--json"]);
    assert.equal(metered.code, 0, metered.stderr);
    const usage = JSON.parse(metered.stdout) as { total?: { calls?: string }; agents: { agent: string }[] };
    assert.deepEqual(
      usage.agents.map((a) => a.agent),
      ["coder"],
    );
    const turns = model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 2);
    assert.equal(Number(usage.total?.calls), model.requests.length);
    for (const request of model.requests) {
      assert.equal(request.headers["x-api-key"], CUSTODY_KEY);
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false);
    }

    // A Read outside the working directory: the policy allows it (not under requires_approval), the
    // harness refuses it, and the job goes on. The harness asked first: a tool result that no permission
    // request covers (its refusal's error result included) stops the job as a policy bypass.
    const outside = await cli(["run", "coder", OUTSIDE_INPUT, "--detach"]);
    assert.equal(outside.code, 0, outside.stderr);
    const outsideJob = outside.stdout.trim();
    const outsideWatched = await cli(["jobs", "watch", outsideJob]);
    assert.equal(outsideWatched.code, 0, `${outsideWatched.stdout}\n${outsideWatched.stderr}`);
    assert.match(outsideWatched.stdout, new RegExp(`job ${outsideJob} succeeded`));
    assert.match(outsideWatched.stdout, /✗ .*is outside the session's working directory|✗ .*refused/);
  } finally {
    await stack.close();
    await model.close();
    if (!process.env["OZ0_KEEP_TEST_HOME"]) rmSync(home, { recursive: true, force: true });
  }
});
