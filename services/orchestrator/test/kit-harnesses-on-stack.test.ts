// A harness that passes the conformance kit runs on the real stack, unchanged
// (issue 21): the Go example harness (examples/harness-go, built here with
// `go build`), the Python fake harness and the SDK's fake harness, installed
// as one plugin, each run
// a job on the Anthropic route and one on the OpenAI route (the agent's model
// names the route) with the scripted model. The model first calls a harness
// operation, a runtime tool the orchestrator serves with a scratch session of
// the same harness; then write_file, which is in requires_approval and waits
// until a person approves it through the orchestrator's API.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ScriptedRequest, ScriptedTurn } from "@oz0/harness/testing";
import { JobService, JobState } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { bearerInterceptor } from "@oz0/serving";
import { eventually, repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const OPERATION = "check_notes";
const TASK = "Does notes.txt say what is left to do?";
const SUMMARY = "All items are done.";

type Route = "anthropic" | "openai";

interface Message {
  role: string;
  content: unknown;
}

function messagesOf(request: ScriptedRequest): Message[] {
  return (request.body?.messages as Message[] | undefined) ?? [];
}

/** The system prompt, from either wire format (Chat Completions carries it as the first message). */
function systemOf(request: ScriptedRequest): string {
  if (request.wire === "openai-chat-completions")
    return messagesOf(request)
      .filter((m) => m.role === "system")
      .map((m) => JSON.stringify(m.content))
      .join("\n");
  const system = request.body?.system as unknown;
  return typeof system === "string" ? system : JSON.stringify(system ?? "");
}

/** Everything the model was shown so far, tool results included. */
function shown(request: ScriptedRequest): string {
  return JSON.stringify(messagesOf(request));
}

function pick({ turn, request }: { turn: number; request: ScriptedRequest }): ScriptedTurn {
  // The operation's scratch session: read the attached notes, answer with the structured result.
  if (systemOf(request).includes(`## Harness operation: ${OPERATION}`)) {
    if (turn === 0) return { toolCalls: [{ name: "read_file", input: { path: "notes.txt" } }] };
    return { text: JSON.stringify({ done: shown(request).includes("nothing left to do") }) };
  }
  // The job's own session: the operation, then a write that waits for a person, then the answer.
  if (turn === 0) return { toolCalls: [{ name: OPERATION, input: { task: TASK } }] };
  if (turn === 1) return { toolCalls: [{ name: "write_file", input: { path: "summary.txt", content: SUMMARY } }] };
  // The operation's result as the harness handed it back (JSON text, spaced or not).
  const done = /\{\\*"done\\*": ?(true|false)\}/.exec(shown(request))?.[1];
  return { text: `Checked the notes and wrote the summary; the operation said done=${done ?? "nothing"}.` };
}

const agentYaml = (harness: string, route: Route): string => `name: ${harness}-${route}
description: Checks the notes with a harness operation and writes a summary a person approves.
runtime: harness:${harness}
model:
  primary: ${route === "openai" ? "openai/gpt-kit" : "anthropic/claude-kit"}
instructions: prompts/notes.md
limits:
  max_steps: 10
  timeout: 5m
harness:
  tools: [read_file, write_file]
  requires_approval: [write_file]
harness_operations:
  - key: ${OPERATION}
    description: Read the notes and say whether anything is left to do.
    instructions: Read notes.txt and return whether it says nothing is left to do.
    result_schema:
      type: object
      properties:
        done: { type: boolean }
      required: [done]
      additionalProperties: false
    timeout_ms: 120000
`;

const HARNESSES = ["go", "python", "fake"] as const;
const HARNESS_NAMES: Record<(typeof HARNESSES)[number], string> = {
  go: "oz0-example-harness-go",
  python: "oz0-fake-harness-python",
  fake: "oz0-fake-harness",
};
const ROUTES: readonly Route[] = ["anthropic", "openai"];

/**
 * A plugin holding the Go example harness, built here, and the Python fake
 * harness, as their authors would ship them. The Python one starts through
 * its shebang, so \`env\` finds python3 on the session's PATH: a bare
 * \`python3\` in the manifest is looked up on the orchestrator's PATH, where
 * it may be a shim (pyenv) that bubblewrap does not show the session.
 */
async function makePlugin(): Promise<string> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-kit-harnesses-"));
  mkdirSync(path.join(dir, "agents"));
  mkdirSync(path.join(dir, "prompts"));
  const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" };
  await promisify(execFile)("go", ["build", "-o", path.join(dir, "harness"), "."], {
    cwd: path.join(repoRoot, "examples", "harness-go"),
    env,
  });
  copyFileSync(
    path.join(repoRoot, "sdk", "harness-ts", "fake", "python", "fake_harness.py"),
    path.join(dir, "fake_harness.py"),
  );
  const agents = HARNESSES.flatMap((harness) =>
    ROUTES.map((route) => [`agents/${harness}-${route}.yaml`, agentYaml(harness, route)] as const),
  );
  for (const [file, yaml] of agents) writeFileSync(path.join(dir, file), yaml);
  writeFileSync(path.join(dir, "prompts", "notes.md"), "You keep the project's notes up to date.\n");
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    `name: kit-harnesses
version: 0.1.0
harnesses:
  - name: go
    command: ["./harness"]
    permissions: true
    capabilities: [permissions, runtime_tools, structured_output]
    tools: [read_file, write_file]
  - name: python
    command: ["./fake_harness.py"]
    permissions: true
    capabilities: [permissions, runtime_tools, structured_output]
    tools: [read_file, write_file, run_command]
  - name: fake
    command: ["oz0-fake-harness"]
    permissions: true
    capabilities: [permissions, runtime_tools, structured_output]
    tools: [read_file, write_file, run_command]
agents:
${agents.map(([file]) => `  - ${file}`).join("\n")}
`,
  );
  return dir;
}

let t: TestStack;
let plugin: string;
let notes: string;

before(async () => {
  t = await startTestStack({ pick });
  plugin = await makePlugin();
  notes = path.join(plugin, "notes.txt");
  writeFileSync(notes, "Release checklist: nothing left to do.\n");
  const installed = await t.cli(["plugin", "install", plugin]);
  assert.equal(installed.code, 0, installed.stdout + installed.stderr);
});

after(async () => {
  await t?.close();
  if (plugin) rmSync(plugin, { recursive: true, force: true });
});

const jsonLines = (text: string): Record<string, Record<string, unknown>>[] =>
  text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, Record<string, unknown>>);

for (const harness of HARNESSES) {
  for (const route of ROUTES) {
    void test(`the ${harness} harness on the ${route} route: a harness operation, then a write a person approves through the API; the job succeeds`, async () => {
      const jobs = createClient(
        JobService,
        createGrpcTransport({ baseUrl: t.url, interceptors: [bearerInterceptor(t.stack.ownerToken)] }),
      );
      const callsBefore = t.model.requests.length;
      const started = await t.cli([
        "run",
        `${harness}-${route}`,
        "Check the notes, then write a summary",
        "--attach",
        notes,
        "--detach",
      ]);
      assert.equal(started.code, 0, started.stderr);
      const jobId = started.stdout.trim();

      // write_file waits for a person: the owner approves it as any client of the API would.
      const approval = await eventually(async () => {
        const waiting = (await jobs.listApprovals({ jobId })).approvals[0];
        if (waiting) return waiting;
        const { job } = await jobs.getJob({ jobId });
        // A job that ended before asking would leave nothing to wait for.
        assert.ok(
          job && job.state <= JobState.WAITING,
          `the job ended ${job ? JobState[job.state] : "unknown"} before asking for approval: ${job?.error}`,
        );
        return undefined;
      });
      assert.equal(approval.tool, "write_file");
      assert.deepEqual(approval.input, { path: "summary.txt", content: SUMMARY });
      await jobs.answerPermission({
        jobId,
        callId: approval.callId,
        allow: true,
        reason: "the summary may be written",
      });

      const watched = await t.cli(["jobs", "watch", jobId]);
      assert.equal(watched.code, 0, watched.stdout + watched.stderr);
      const { job } = await jobs.getJob({ jobId });
      assert.equal(job?.error ?? "", "");
      assert.match(watched.stdout, new RegExp(`job ${jobId} succeeded`));
      assert.equal(job?.resultText, "Checked the notes and wrote the summary; the operation said done=true.");

      const events = jsonLines((await t.cli(["jobs", "watch", jobId, "--json"])).stdout);
      const started_ = events.find((e) => e.sessionStarted)?.sessionStarted;
      assert.equal(started_?.harnessName, HARNESS_NAMES[harness]);
      const decisions = events.flatMap((e) => (e.permissionDecision ? [e.permissionDecision] : []));
      const toolResults = events.flatMap((e) => (e.toolResult ? [e.toolResult] : []));
      const callIdOf = (tool: string): unknown => events.find((e) => e.toolCall?.tool === tool)?.toolCall?.callId;
      // The runtime tool was asked about (the policy allowed it), relayed, and its validated result came back.
      const operationCall = callIdOf(OPERATION);
      assert.ok(operationCall, `no tool_call for ${OPERATION}`);
      assert.ok(
        events.some((e) => e.permissionRequested?.tool === OPERATION && e.permissionRequested.callId === operationCall),
        "the runtime tool call was not asked about",
      );
      assert.deepEqual(
        decisions.filter((d) => d.tool === OPERATION).map((d) => [d.decider, d.allow]),
        [["DECIDER_POLICY", true]],
      );
      const operationResult = toolResults.find((r) => r.callId === operationCall);
      assert.equal(operationResult?.isError ?? false, false, JSON.stringify(operationResult));
      assert.match(String(operationResult?.output), /"done": ?true/);
      // The write waited for a person and ran once approved.
      const write = decisions.filter((d) => d.tool === "write_file");
      assert.deepEqual(
        write.map((d) => [d.pending ?? false, d.decider, d.allow ?? false]),
        [
          [true, undefined, false],
          [false, "DECIDER_PERSON", true],
        ],
      );
      assert.equal(toolResults.find((r) => r.callId === callIdOf("write_file"))?.isError ?? false, false);
      assert.equal(events.at(-1)?.stateChanged?.state, "JOB_STATE_SUCCEEDED");
      const artifacts = /artifact: (\S+changes\.patch)/.exec(watched.stdout)?.[1];
      assert.ok(artifacts, watched.stdout);
      assert.match(readFileSync(artifacts, "utf8"), new RegExp(`^\\+${SUMMARY}$`, "m"));

      // Every model call of the job and of its scratch session went on the agent's route, with its model.
      const calls = t.model.requests.slice(callsBefore);
      assert.equal(calls.length, 5, "three turns of the job, two of the operation's scratch session");
      for (const call of calls) {
        assert.equal(
          call.wire,
          route === "openai" ? "openai-chat-completions" : "anthropic-messages",
          `${call.method} ${call.path}`,
        );
        assert.equal(call.body?.model, route === "openai" ? "gpt-kit" : "claude-kit");
      }
    });
  }
}
