// The real Claude Code binary, offline against the scripted model, driven
// through dist/main.js exactly as the runtime drives a harness.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { PermissionAnswer_Outcome, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { HEADERS, PLANTED_SECRET, TOKEN, ofCase, removeRun, runHarness } from "./harness-run.js";

void test("reads, edits, writes and runs commands, asking the runtime before every call", async () => {
  const run = await runHarness({
    files: { "notes.txt": "alpha\n" },
    turns: ({ workingDir }) => [
      {
        text: "I will look at the notes.",
        toolCalls: [{ name: "Read", input: { file_path: path.join(workingDir, "notes.txt") } }],
      },
      {
        toolCalls: [
          {
            name: "Edit",
            input: { file_path: path.join(workingDir, "notes.txt"), old_string: "alpha", new_string: "beta" },
          },
        ],
      },
      { toolCalls: [{ name: "Write", input: { file_path: path.join(workingDir, "new.txt"), content: "fresh\n" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "echo forbidden > denied.txt", description: "Write a file" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "echo original > bash.txt", description: "Write a file" } }] },
      { text: "All done." },
    ],
    answer: (request) => {
      const command = request.input?.["command"];
      if (command === "echo forbidden > denied.txt")
        return { allow: false, reason: "Commands that write files need a ticket." };
      // The changed input must be what runs; it also records the environment Claude Code gives its tools.
      if (command === "echo original > bash.txt")
        return {
          allow: true,
          input: { command: "env > env.txt; echo modified > bash.txt", description: "Write a file" },
        };
      return { allow: true };
    },
  });
  try {
    assert.equal(run.outcome.status, "completed", `${run.outcome.error?.message ?? ""}\n${run.stderr}`);
    const result = run.outcome.result;
    assert.equal(result?.stopReason, StopReason.COMPLETED, result?.error);
    assert.equal(result?.text, "All done.");
    assert.equal(run.outcome.leftoverProcesses, false);

    // The files say which calls ran, and with which input.
    assert.equal(await readFile(path.join(run.workingDir, "notes.txt"), "utf8"), "beta\n");
    assert.equal(await readFile(path.join(run.workingDir, "new.txt"), "utf8"), "fresh\n");
    assert.equal(existsSync(path.join(run.workingDir, "denied.txt")), false, "the denied command ran");
    assert.equal(await readFile(path.join(run.workingDir, "bash.txt"), "utf8"), "modified\n");

    // Each tool call is announced, then asked about, with a title for a person.
    const calls = ofCase(run.events, "toolCall");
    const asks = ofCase(run.events, "permissionRequest");
    assert.deepEqual(
      calls.map((c) => c.tool),
      ["Read", "Edit", "Write", "Bash", "Bash"],
    );
    assert.deepEqual(
      asks.map((a) => a.callId),
      calls.map((c) => c.callId),
    );
    assert.deepEqual(
      asks.map((a) => a.title),
      [
        `Read ${path.join(run.workingDir, "notes.txt")}`,
        `Edit ${path.join(run.workingDir, "notes.txt")}`,
        `Write ${path.join(run.workingDir, "new.txt")}`,
        "Run echo forbidden > denied.txt",
        "Run echo original > bash.txt",
      ],
    );
    const order = run.events.map((e) => e.event.case);
    for (const ask of asks) {
      const callAt = run.events.findIndex((e) => e.event.case === "toolCall" && e.event.value.callId === ask.callId);
      const askAt = run.events.findIndex((e) => e.event.case === "permissionRequest" && e.event.value.id === ask.id);
      assert.ok(callAt >= 0 && callAt < askAt, `tool_call before permission_request: ${order.join(",")}`);
    }

    // The denial's reason reaches the model as an error tool result, in the next request.
    const results = ofCase(run.events, "toolResult");
    assert.deepEqual(
      results.map((r) => r.isError),
      [false, false, false, true, false],
    );
    const denied = results[3];
    assert.match(String(denied?.output ? toJson(ValueSchema, denied.output) : ""), /need a ticket/);
    // One model call per turn and no other call (no title, quota or telemetry side calls).
    const turns = run.model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 6);
    assert.equal(run.model.requests.length, 6);
    const toolResultSent = JSON.stringify(turns[4]?.body?.messages?.at(-1));
    assert.match(toolResultSent, /"is_error":true/);
    assert.match(toolResultSent, /Commands that write files need a ticket\./);

    // Every model call carries the job, the agent and the session token, and never the provider key.
    for (const request of run.model.requests) {
      assert.equal(request.headers["oz0-job"], HEADERS["Oz0-Job"]);
      assert.equal(request.headers["oz0-agent"], HEADERS["Oz0-Agent"]);
      assert.equal(request.headers["x-api-key"], TOKEN);
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false, "the provider key reached the model");
    }
    // ... and Claude Code's environment does not hold it either; HOME and its configuration are in the state directory.
    const env = await readFile(path.join(run.workingDir, "env.txt"), "utf8");
    assert.equal(env.includes(PLANTED_SECRET), false, "the provider key reached Claude Code's environment");
    assert.match(env, new RegExp(`^HOME=${path.join(run.stateDir, "home")}$`, "m"));
    assert.match(env, new RegExp(`^CLAUDE_CONFIG_DIR=${path.join(run.stateDir, "claude")}$`, "m"));

    // The instructions are appended to Claude Code's own system prompt.
    const system = JSON.stringify(turns[0]?.body?.system);
    assert.match(system, /Claude Code/);
    assert.match(system, /Answer in one short sentence\./);
    assert.equal(turns[0]?.body?.model, "claude-sonnet-4-5");
    assert.deepEqual(turns[0]?.body?.tools.map((t: { name: string }) => t.name).sort(), [
      "Bash",
      "Edit",
      "Glob",
      "Grep",
      "Read",
      "Write",
    ]);

    // Text streams as deltas; usage comes per model call and per model in the result.
    const text = ofCase(run.events, "text");
    assert.ok(text.every((t) => t.delta && t.itemId !== ""));
    assert.equal(text.map((t) => t.text).join(""), "I will look at the notes.All done.");
    assert.equal(ofCase(run.events, "usage").length, 6);
    assert.equal(result?.usage[0]?.model, "claude-sonnet-4-5");
    assert.ok((result?.usage[0]?.inputTokens ?? 0n) > 0n);
    assert.equal(result?.turns, 6);
  } finally {
    await removeRun(run);
  }
});

for (const mode of ["acceptEdits", "plan", "bypassPermissions"] as const) {
  void test(`permission_mode ${mode} still asks before every call, and a refused call does not run`, async () => {
    const run = await runHarness({
      files: { "notes.txt": "alpha\n" },
      request: { harnessOptions: { permission_mode: mode } },
      turns: ({ workingDir }) => [
        { toolCalls: [{ name: "Read", input: { file_path: path.join(workingDir, "notes.txt") } }] },
        {
          toolCalls: [
            {
              name: "Edit",
              input: { file_path: path.join(workingDir, "notes.txt"), old_string: "alpha", new_string: "beta" },
            },
          ],
        },
        { toolCalls: [{ name: "Bash", input: { command: "echo ran > bash.txt", description: "Write a file" } }] },
        { text: "Stopped." },
      ],
      // Read is let through: Claude Code refuses an Edit of a file it has not read before asking anyone.
      answer: (request) =>
        request.tool === "Read" ? { allow: true } : { allow: false, outcome: PermissionAnswer_Outcome.TIMED_OUT },
    });
    try {
      assert.equal(
        run.outcome.result?.stopReason,
        StopReason.COMPLETED,
        `${run.outcome.result?.error ?? ""}\n${run.stderr}`,
      );
      assert.deepEqual(
        ofCase(run.events, "permissionRequest").map((a) => a.tool),
        ["Read", "Edit", "Bash"],
      );
      assert.equal(await readFile(path.join(run.workingDir, "notes.txt"), "utf8"), "alpha\n");
      assert.equal(existsSync(path.join(run.workingDir, "bash.txt")), false);
      const refused = JSON.stringify(run.model.requests.at(-1)?.body?.messages?.at(-1));
      assert.match(refused, /Nobody approved this tool call in time/);
    } finally {
      await removeRun(run);
    }
  });
}

void test("the input is the task as written: a leading slash runs no command and an @path reads no file", async (t) => {
  const outside = await mkdtemp(path.join(os.tmpdir(), "oz0-outside-"));
  t.after(() => rm(outside, { recursive: true, force: true }));
  const secretFile = path.join(outside, "outside.txt");
  await writeFile(secretFile, "OUTSIDE-FILE-CONTENT-4f1c\n");
  // The input of a harness operation's scratch session is the model's text: it may be anything.
  const input = `/security-review Summarize @${secretFile} please`;
  const run = await runHarness({ request: { input }, turns: () => [{ text: "Done." }] });
  try {
    assert.equal(
      run.outcome.result?.stopReason,
      StopReason.COMPLETED,
      `${run.outcome.result?.error ?? ""}\n${run.stderr}`,
    );
    const sent = JSON.stringify(run.model.requests.map((request) => request.body?.messages));
    assert.ok(!sent.includes("OUTSIDE-FILE-CONTENT"), "the file an @path named was read into the model's context");
    assert.equal(run.model.requests.length, 1, "one model call: no command's own turns");
    const user = JSON.stringify(run.model.requests[0]?.body?.messages?.at(-1));
    assert.ok(
      user.includes(JSON.stringify(input).slice(1, -1)),
      `the model got the input as written: ${user.slice(0, 400)}`,
    );
    assert.deepEqual(ofCase(run.events, "permissionRequest"), []);
  } finally {
    await removeRun(run);
  }
});
