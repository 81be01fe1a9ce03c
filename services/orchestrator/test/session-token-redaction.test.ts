// A session's LLM token printed by the job (a tool that runs `env`, a debug
// line) stays out of the job's events, which every viewer of the job reads,
// as it stays out of the job's stderr: the harness host takes it out of every
// line the harness writes (an attacker review found it in `oz0 jobs watch`,
// `oz0 run`'s output and the orchestrator's store while the token still
// spent the job's budget).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { commitAll, startTestStack } from "./support/test-stack.js";
import { toolResults } from "./support/tool-results.js";

void test("a job that prints its session token shows [redacted] in its events and output, and no file of the stack keeps the token", async (t) => {
  let seenToken = "";
  const pick = ({ turn, request }: { turn: number; input: string; request: ScriptedRequest }): ScriptedTurn => {
    if (turn === 0)
      return {
        toolCalls: [
          {
            name: "run_command",
            input: { command: `printf 'tok:%s' "$OZ0_LLM_TOKEN"; printf '%s' "$OZ0_LLM_TOKEN" >&2` },
          },
        ],
      };
    // The model reads the tool's output inside the harness, before any redaction: the token as the job saw it.
    seenToken = /oz0st_[A-Za-z0-9_-]+/.exec(toolResults(request))?.[0] ?? "";
    return { text: `done; it said ${seenToken}` };
  };
  const stack = await startTestStack({ pick });
  t.after(() => stack.close());
  const repo = mkdtempSync(path.join(os.tmpdir(), "oz0-token-repo-"));
  t.after(() => rmSync(repo, { recursive: true, force: true }));
  for (const sub of ["agents", "prompts"]) mkdirSync(path.join(repo, sub));
  writeFileSync(path.join(repo, "prompts", "p.md"), "Do as you are told.\n");
  writeFileSync(
    path.join(repo, "oz0-plugin.yaml"),
    'name: tokens\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    tools: [run_command]\nagents:\n  - agents/printer.yaml\n',
  );
  writeFileSync(
    path.join(repo, "agents", "printer.yaml"),
    "name: printer\nruntime: harness:fake\nmodel:\n  primary: anthropic/claude-sonnet-5-5\ninstructions: prompts/p.md\nharness:\n  tools: [run_command]\n",
  );
  await commitAll(repo, "plugin");
  assert.equal((await stack.cli(["plugin", "install", `file://${repo}`])).code, 0);
  const run = await stack.cli(["run", "printer", "print it"]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(seenToken, /^oz0st_[A-Za-z0-9_-]{20,}$/, "the job printed a token");
  const jobId = /job_\w+/.exec(run.stdout + run.stderr)![0];
  const watched = (await stack.cli(["jobs", "watch", jobId, "--json"])).stdout;
  for (const [where, text] of [
    ["oz0 run", run.stdout + run.stderr],
    ["oz0 jobs watch --json", watched],
    ["oz0 jobs show --json", (await stack.cli(["jobs", "show", jobId, "--json"])).stdout],
    ["oz0 jobs logs", (await stack.cli(["jobs", "logs", jobId])).stdout],
  ])
    assert.equal(text!.includes(seenToken), false, `${where} shows the session token`);
  assert.match(watched, /tok:\[redacted\]/, "the tool's output, with the token taken out");
  assert.match(watched, /done; it said \[redacted\]/, "and the model's answer");
  let files = "";
  try {
    files = execFileSync("grep", ["-rlaF", seenToken, stack.home], { encoding: "utf8" });
  } catch {
    // grep exits 1 when nothing matched.
  }
  assert.equal(files, "", "a file of the stack keeps the token");
});
