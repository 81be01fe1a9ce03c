// A command hook deciding a call of a harness operation's scratch session is stopped when the job is cancelled, as
// one deciding a call of the job's own session is (approvals-end-to-end.test.ts): the scratch loop asked its hooks
// without the cancel's signal, so the hook ran on on the orchestrator's host until its timeout (hours, if its
// plugin says so), long after the job had ended. So is one whose scratch session's harness dies meanwhile.
import assert from "node:assert/strict";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";
import { commitAll, startTestStack, type TestStack } from "./support/test-stack.js";
import { eventually } from "./support/eventually.js";
import { holdingHook } from "./support/holding-hook.js";

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "hooks");

/** The job's own session calls the operation; its scratch session asks to run the command the job's input names. */
const HARNESS = `
import readline from "node:readline";
const out = (event) => process.stdout.write(JSON.stringify(event) + "\\n");
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const next = async () => { const l = await lines.next(); if (l.done) process.exit(0); return JSON.parse(l.value); };
const request = await next();
out({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "asker", capabilities: { permissions: true, runtimeTools: true, structuredOutput: true } } });
const done = (extra) => { out({ result: { stopReason: "STOP_REASON_COMPLETED", ...extra } }); process.stdout.write("", () => process.exit(0)); };
if (request.outputSchema) {
  // The operation's input carries the job's, hold PORT: the holding hook connects to the port.
  const command = /hold \\d+/.exec(request.input)?.[0] ?? "no port";
  out({ toolCall: { callId: "scratch-call", tool: "run_command", input: { command } } });
  out({ permissionRequest: { id: "perm-scratch", callId: "scratch-call", tool: "run_command", input: { command }, title: "run" } });
  // "and die": it crashes while the hook decides, with no result.
  if (request.input.includes("and die")) setTimeout(() => process.exit(3), 1000);
  await next();
  done({ text: '{"summary":"ok"}', structuredOutput: { summary: "ok" } });
} else {
  out({ permissionRequest: { id: "perm-op", callId: "call-op", tool: "summarize", input: { task: request.input }, title: "summarize" } });
  await next();
  out({ runtimeToolCall: { id: "rt-1", name: "summarize", input: { task: request.input } } });
  await next();
  done({ text: "done" });
}
`;

let t: TestStack;
const repo = mkdtempSync(path.join(os.tmpdir(), "oz0-scratch-hook-"));

before(async () => {
  t = await startTestStack({ pick: () => ({ text: "unused" }) });
  for (const sub of ["agents", "prompts", "hooks"]) mkdirSync(path.join(repo, sub));
  writeFileSync(path.join(repo, "prompts", "p.md"), "Be careful.\n");
  writeFileSync(path.join(repo, "asker.mjs"), HARNESS);
  copyFileSync(path.join(fixtures, "hold.mjs"), path.join(repo, "hooks", "hold.mjs"));
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    [
      "name: scratch-hooks",
      "version: 0.1.0",
      "harnesses:",
      "  - name: asker",
      '    command: ["node", "asker.mjs"]',
      "    permissions: true",
      "    capabilities: [permissions, runtime_tools, structured_output]",
      "    tools: [run_command]",
      "agents:",
      "  - agents/held.yaml",
      "",
    ].join("\n"),
  );
  writeFileSync(
    path.join(repo, "agents", "held.yaml"),
    [
      "name: held",
      "description: Its operation's scratch session asks for a call its hook holds.",
      "runtime: harness:asker",
      "model: { primary: anthropic/claude-sonnet-5-5 }",
      "instructions: prompts/p.md",
      "harness:",
      "  tools: [run_command]",
      "hooks:",
      "  - name: holding-guard",
      "    match: asker.run_command",
      '    command: ["node", "hooks/hold.mjs"]',
      "    timeout: 10m",
      "harness_operations:",
      "  - key: summarize",
      "    description: Summarize.",
      "    instructions: Summarize it.",
      "    result_schema: { type: object, properties: { summary: { type: string } }, required: [summary] }",
      "    timeout_ms: 300000",
      "",
    ].join("\n"),
  );
  await commitAll(repo, "plugin");
  const installed = await t.cli(["plugin", "install", `file://${repo}`, "--allow-host-hooks"]);
  assert.equal(installed.code, 0, `${installed.stdout}${installed.stderr}`);
});

after(async () => {
  await t?.close();
  rmSync(repo, { recursive: true, force: true });
});

void test(
  "cancelling a job stops the hook deciding a call of its harness operation's scratch session",
  { timeout: 120_000 },
  async () => {
    const { port, hook: holding, close } = await holdingHook();
    try {
      const run = await t.cli(["run", "held", `hold ${port}`, "--detach"]);
      assert.equal(run.code, 0, run.stderr);
      const jobId = run.stdout.trim();
      const hook = await holding;
      const hookEnded = new Promise((resolve) => hook.once("close", resolve));
      const cancelled = await t.cli(["jobs", "cancel", jobId, "--reason", "changed plans"]);
      assert.equal(cancelled.code, 0, cancelled.stderr);
      await eventually(async () => {
        const shown = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as { state: string };
        return shown.state === "JOB_STATE_CANCELLED" ? shown : undefined;
      });
      // Killed with the cancel, not at its timeout of ten minutes (past this test's own).
      await hookEnded;
    } finally {
      close();
    }
  },
);

// The scratch session's exit was read only after its permission request was handled, which waited for the hook.
void test(
  "a scratch session whose harness dies while a hook decides its call stops the hook; the job goes on",
  { timeout: 120_000 },
  async () => {
    const { port, hook: holding, close } = await holdingHook();
    try {
      const run = await t.cli(["run", "held", `hold ${port} and die`, "--detach"]);
      assert.equal(run.code, 0, run.stderr);
      const jobId = run.stdout.trim();
      const hook = await holding;
      const hookEnded = new Promise((resolve) => hook.once("close", resolve));
      // Killed once the scratch session's exit is heard, not at its timeout of ten minutes (past this test's own).
      await hookEnded;
      const shown = await eventually(async () => {
        const job = JSON.parse((await t.cli(["jobs", "show", jobId, "--json"])).stdout) as { state: string };
        return job.state === "JOB_STATE_SUCCEEDED" ? job : undefined;
      }, "the job's own session goes on with the operation's failure");
      assert.equal(shown.state, "JOB_STATE_SUCCEEDED");
    } finally {
      close();
    }
  },
);
