#!/usr/bin/env node
// `npm start` (after `npm run build`): the main job on embedded defaults.
// Starts the four services on loopback, installs the Claude Agent SDK harness
// (plugins/harness-claude) and the bundled example plugin with
// `oz0 plugin install`, and runs the example's `claude-fixer` agent with
// `oz0 run` on examples/projects/dates, whose test fails. The agent reads the
// code, writes the fix and runs the test through Claude Code's real tools in a
// real session. Then the demo applies the job's patch to a fresh copy of the
// project and runs its test again, to show it passes: in a session of the
// stack's sandbox too (demo-check/), since the patch is code the agent wrote.
// OZ0_DEMO_HARNESS=fake runs the example's `fixer` agent on the SDK's fake
// harness instead, for machines where the Claude Code binary cannot run.
// Without ANTHROPIC_API_KEY the model is the scripted model, answering from
// the agent's script in examples/plugins/example, and the output says so.
// Its process.exit() must not hang in Node's teardown once the demo is done.
import "./exit-by-exec.mjs";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { checkPatchInSandbox } from "../demo-check/check-in-sandbox.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const orchestratorDist = path.join(root, "services/orchestrator/dist");
if (!existsSync(path.join(orchestratorDist, "index.js"))) {
  console.error("start-demo: the orchestrator is not built; run `npm run build` (npm start does it for you)");
  process.exit(1);
}
const { applyEnvironmentKeys, embeddedStackEnv, isolationNotice, readDiscovery, startEmbeddedStack } = await import(
  path.join(orchestratorDist, "index.js")
);
const { stackTokenFor } = await import("@oz0/serving");
// What the patched project's tests print is the agent's doing: shown inert, as oz0 shows a job's text.
const { escapeRefusedCharacters } = await import("@oz0/harness/text");
const inert = (text) => text.split("\n").map(escapeRefusedCharacters).join("\n");
const cli = path.join(orchestratorDist, "cli/main.js");
const plugin = path.join(root, "examples/plugins/example");
const harnessPlugin = path.join(root, "plugins/harness-claude");
const project = path.join(root, "examples/projects/dates");

let home = path.resolve(process.env.OZ0_HOME || path.join(os.homedir(), ".oz0"));
if (readDiscovery(home)) home = path.join(home, "demo"); // an `oz0 dev` stack owns that data directory
const harness = process.env.OZ0_DEMO_HARNESS || "claude";
if (harness !== "claude" && harness !== "fake") {
  console.error(
    `start-demo: OZ0_DEMO_HARNESS must be "claude" (the default) or "fake", got ${JSON.stringify(harness)}`,
  );
  process.exit(2);
}
// Each agent has its own script: Claude Code's tools (Bash) differ from the fake harness's.
const demo =
  harness === "claude"
    ? {
        agent: "claude-fixer",
        script: "demo-script-claude.json",
        runtime: "Claude Code (harness:claude-agent-sdk, from plugins/harness-claude)",
      }
    : {
        agent: "fixer",
        script: "demo-script.json",
        runtime: "the SDK's fake harness (harness:fake; OZ0_DEMO_HARNESS=fake)",
      };
if (harness === "claude" && !existsSync(path.join(harnessPlugin, "dist/main.js"))) {
  console.error("start-demo: plugins/harness-claude is not built; run `npm run build` (npm start does it for you)");
  process.exit(1);
}
const useRealModel = Boolean(process.env.ANTHROPIC_API_KEY);
const scriptFile = path.join("examples/plugins/example", demo.script);
const defaults = embeddedStackEnv({ home, modelScript: useRealModel ? undefined : path.join(root, scriptFile) });

// Bold and colour only on a terminal, and never with NO_COLOR (no-color.org).
const styled = process.stdout.isTTY && !process.env.NO_COLOR;
const style = (code, text) => (styled ? `\x1b[${code}m${text}\x1b[0m` : text);
const say = (line) => process.stdout.write(`\n${style(1, line)}\n`);
say(`Orchestrator Zero demo (data in ${home})`);
if (useRealModel)
  console.log("Model: anthropic/claude-sonnet-5-5 through the LLM proxy, with ANTHROPIC_API_KEY from the environment.");
else
  console.log(
    `Model: the SCRIPTED model (no ANTHROPIC_API_KEY set): it answers from ${scriptFile}.\nThe tools, the session and the test run are real. Set ANTHROPIC_API_KEY to use a real model.`,
  );
console.log(`Agent: ${demo.agent}, on ${demo.runtime}.`);

const stack = await startEmbeddedStack({ home, env: defaults.env });
let exitCode = 1;
try {
  const notice = isolationNotice(stack);
  if (notice) console.log(style(33, `note: ${notice}`));
  console.log(
    `Stack: orchestrator ${stack.urls.orchestrator}, sandbox ${stack.urls.sandbox}, llm-proxy ${stack.urls["llm-proxy"]}, events ${stack.urls.events} (logs in ${path.join(home, "logs")})`,
  );
  const env = { ...process.env, OZ0_URL: stack.urls.orchestrator, OZ0_HOME: home };
  const oz0 = (args, options = {}) =>
    new Promise((resolve) => {
      say(`$ oz0 ${args.map((a) => (/\s/.test(a) ? JSON.stringify(a) : a)).join(" ")}`);
      const child = spawn(process.execPath, [cli, ...args], {
        env,
        stdio: ["pipe", options.capture ? "pipe" : "inherit", "inherit"],
      });
      let out = "";
      child.stdout?.on("data", (d) => {
        out += d;
        process.stdout.write(d);
      });
      child.stdin.end(options.input ?? "");
      child.on("exit", (code) => resolve({ code: code ?? 1, out }));
    });
  if (useRealModel) {
    const keys = await applyEnvironmentKeys(async ({ name, value }) => {
      const r = await oz0(["secret", "set", name], { input: value });
      if (r.code !== 0) throw new Error(`oz0 secret set ${name} failed`);
    });
    console.log(`(handed ${keys.join(", ")} to the LLM proxy)`);
  }
  // The harness first: installing the example checks that every agent's runtime is installed.
  const harnessInstalled = await oz0(["plugin", "install", path.relative(process.cwd(), harnessPlugin) || "."]);
  if (harnessInstalled.code !== 0) throw new Error("installing the harness-claude plugin failed");
  const installed = await oz0(["plugin", "install", path.relative(process.cwd(), plugin) || "."]);
  if (installed.code !== 0) throw new Error("installing the example plugin failed");
  // The web console, logged in through a one-time link, shows the job live while the demo runs.
  const opened = await oz0(["console"]);
  if (opened.code !== 0) throw new Error("oz0 console failed");
  const run = await oz0(
    ["run", demo.agent, "Fix the failing test in the dates project", "--attach", path.relative(process.cwd(), project)],
    { capture: true },
  );
  exitCode = run.code;
  const where = /artifacts of (job_\w+) are in (.+)/.exec(run.out);
  if (run.code === 0 && where) {
    say(
      `$ node --test   (in a fresh copy of ${path.relative(process.cwd(), project) || "."} with the job's patch applied, but not to its tests, in a sandbox session: the patch is the agent's code)`,
    );
    const check = await checkPatchInSandbox({
      sandboxUrl: stack.urls.sandbox,
      token: stackTokenFor(stack.credentials, "orchestrator", "sandbox"),
      home,
      project,
      patch: path.join(where[2].trim(), "changes.patch"),
    });
    if (check.passed) {
      // The summary lines: `# pass 2` (TAP, Node 22) or `ℹ pass 2` (spec, Node 24).
      console.log(
        inert(check.output)
          .split("\n")
          .filter((l) => /^[#ℹ] (tests|pass|fail) /.test(l))
          .join("\n"),
      );
      say(
        `The test passes. Job ${where[1]}: see it with \`OZ0_HOME=${home} npx oz0 jobs show ${where[1]}\`, or in the web console after this demo (\`OZ0_HOME=${home} npx oz0 dev\` prints its link).`,
      );
    } else {
      console.log(inert(check.output));
      say(`The test still fails with the job's patch applied: ${inert(check.error)}`);
      exitCode = 1;
    }
  } else if (run.code !== 0) {
    say(`The job did not succeed (exit status ${run.code}); the services' logs are in ${path.join(home, "logs")}.`);
  }
} catch (error) {
  console.error(`start-demo: ${error.message}`);
  exitCode = 1;
} finally {
  await stack.close();
}
process.exit(exitCode);
