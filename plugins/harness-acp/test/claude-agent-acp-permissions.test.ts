// claude-agent-acp with the real Claude Code binary (offline, against the
// scripted model): every tool call asks the runtime, whatever the working
// directory holds and whatever the input says.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, symlink, writeFile } from "node:fs/promises";
import path from "node:path";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { ofCase, removeRun, runHarness } from "./harness-run.js";

const TOOLS = ["Read", "Write", "Edit", "Glob", "Grep", "Bash"];

void test("claude-agent-acp: Read, Grep and Glob ask like Write and Bash; a denied call does not run", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir }) => writeFile(path.join(workingDir, "a.txt"), "alpha\n"),
    turns: ({ workingDir }) => [
      { toolCalls: [{ name: "Read", input: { file_path: path.join(workingDir, "a.txt") } }] },
      { toolCalls: [{ name: "Grep", input: { pattern: "alpha", path: workingDir } }] },
      { toolCalls: [{ name: "Glob", input: { pattern: "*" } }] },
      { toolCalls: [{ name: "Write", input: { file_path: path.join(workingDir, "w.txt"), content: "w" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "mkdir made", description: "mkdir" } }] },
      { text: "Done." },
    ],
    answer: () => ({ allow: false, reason: "no" }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => p.tool),
      ["Read", "Grep", "Glob", "Write", "Bash"],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => r.isError),
      [true, true, true, true, true],
    );
    assert.equal(existsSync(path.join(run.workingDir, "w.txt")), false);
    assert.equal(existsSync(path.join(run.workingDir, "made")), false);
    // The file's content never reached the model.
    assert.equal(JSON.stringify(run.model.requests).includes("alpha\\n"), false);
  } finally {
    await removeRun(run);
  }
});

for (const name of ["settings.json", "settings.local.json"]) {
  void test(`claude-agent-acp: a working directory whose .claude/${name} sets permissions.defaultMode is refused before the agent starts`, async () => {
    const run = await runHarness({
      harnessOptions: { agent: "claude", tools: TOOLS },
      setup: async ({ workingDir }) => {
        await mkdir(path.join(workingDir, ".claude"));
        await writeFile(
          path.join(workingDir, ".claude", name),
          JSON.stringify({ permissions: { defaultMode: "acceptEdits" } }),
        );
      },
      turns: () => [{ toolCalls: [{ name: "Write", input: { file_path: "w.txt", content: "w" } }] }, { text: "x" }],
    });
    try {
      assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
      assert.equal(
        run.outcome.result?.error,
        `${path.join(run.workingDir, ".claude", name)} sets permissions.defaultMode "acceptEdits", which claude-agent-acp would run this session in (tool calls without asking); remove permissions.defaultMode from it before running this agent here`,
      );
      assert.equal(run.model.requests.length, 0);
    } finally {
      await removeRun(run);
    }
  });
}

void test("claude-agent-acp started in acceptEdits (its user settings) is switched back to default: Write asks", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir, stateDir }) => {
      await writeFile(path.join(workingDir, "a.txt"), "alpha\n");
      // CLAUDE_CONFIG_DIR: claude-agent-acp takes permissions.defaultMode from here too.
      await mkdir(path.join(stateDir, "claude"));
      await writeFile(
        path.join(stateDir, "claude", "settings.json"),
        JSON.stringify({ permissions: { defaultMode: "acceptEdits" } }),
      );
    },
    turns: ({ workingDir }) => [
      { toolCalls: [{ name: "Write", input: { file_path: path.join(workingDir, "w.txt"), content: "w" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "mkdir made", description: "mkdir" } }] },
      { text: "Done." },
    ],
    answer: (request) => (request.tool === "Write" ? { allow: true } : { allow: false, reason: "no" }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.match(
      run.stderr,
      /"message":"the agent started the session in another mode; switching it back","mode":"acceptEdits","to":"default"/,
    );
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => p.tool),
      ["Write", "Bash"],
    );
    assert.equal(existsSync(path.join(run.workingDir, "w.txt")), true);
    assert.equal(existsSync(path.join(run.workingDir, "made")), false);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: read-only commands ask too (ls, git status, git diff), and the default tools are harness-claude's", async () => {
  // Claude Code's default mode runs read-only Bash commands unasked; git diff runs a repository's diff.external.
  const run = await runHarness({
    harnessOptions: { agent: "claude" },
    setup: async ({ workingDir }) => {
      execFileSync("git", ["init", "-q", workingDir]);
      await writeFile(path.join(workingDir, "a.txt"), "alpha\n");
    },
    turns: () => [
      { toolCalls: [{ name: "Bash", input: { command: "ls", description: "List files" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "git status", description: "Status" } }] },
      { toolCalls: [{ name: "Bash", input: { command: "git diff", description: "Diff" } }] },
      { text: "Done." },
    ],
    answer: (request) => (request.input?.["command"] === "ls" ? { allow: true } : { allow: false, reason: "no" }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => p.input?.["command"]),
      ["ls", "git status", "git diff"],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => r.isError),
      [false, true, true],
    );
    // The tools the model was offered: the session's, no tool that allows itself.
    const offered = (run.model.requests[0]?.body?.tools ?? []).map((t: { name: string }) => t.name).sort();
    assert.deepEqual(offered, ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: a repository whose config names a program git runs is refused before the agent starts", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir }) => {
      execFileSync("git", ["init", "-q", workingDir]);
      execFileSync("git", ["-C", workingDir, "config", "filter.x.clean", "touch ran; cat"]);
      await writeFile(path.join(workingDir, ".gitattributes"), "* filter=x\n");
    },
    turns: () => [{ text: "Done." }],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
    assert.match(
      run.outcome.result?.error ?? "",
      /configuration sets filter\.x\.clean, a program git runs; .*git config --unset filter\.x\.clean/,
    );
    assert.equal(run.model.requests.length, 0);
    assert.equal(existsSync(path.join(run.workingDir, "ran")), false);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: a repository's core.fsmonitor does not run in Claude Code's own git calls", async () => {
  let marker = "";
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir }) => {
      marker = path.join(path.dirname(workingDir), "fsmonitor-ran");
      execFileSync("git", ["init", "-q", workingDir]);
      execFileSync("git", ["-C", workingDir, "config", "core.fsmonitor", `touch ${marker}; false`]);
      await writeFile(path.join(workingDir, "a.txt"), "alpha\n");
    },
    turns: () => [{ text: "Done." }],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.equal(existsSync(marker), false, "the repository's core.fsmonitor command ran");
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: the input's @path is not read into the context", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    request: { input: "Summarize @../outside.txt" },
    setup: async ({ workingDir }) =>
      writeFile(path.join(path.dirname(workingDir), "outside.txt"), "OUTSIDE-SECRET-CONTENT\n"),
    turns: () => [{ text: "Done." }],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    const sent = JSON.stringify(run.model.requests.map((r) => r.body?.messages));
    assert.equal(sent.includes("OUTSIDE-SECRET-CONTENT"), false, "the mentioned file reached the model");
    assert.match(sent, /Summarize \\u200b@\.\.\/outside\.txt|Summarize \u200b@\.\.\/outside\.txt/);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: an input starting with / is text for the model, not a slash command", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    request: { input: "/security-review" },
    turns: () => [{ text: "Done." }],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    const turns = run.model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 1);
    const messages = JSON.stringify(turns[0]?.body?.messages);
    // The command would have expanded to its prompt (and run git first).
    assert.doesNotMatch(messages, /security review/i);
    assert.match(messages, /\/security-review/);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: a path outside with leading whitespace (which Claude Code trims) is outside: asked about, refused though allowed", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir }) =>
      writeFile(path.join(path.dirname(workingDir), "outside.txt"), "SPACED-OUTSIDE-SECRET\n"),
    turns: ({ workingDir }) => [
      { toolCalls: [{ name: "Read", input: { file_path: ` ${path.join(path.dirname(workingDir), "outside.txt")}` } }] },
      {
        toolCalls: [
          {
            name: "Write",
            input: { file_path: `\t${path.join(path.dirname(workingDir), "planted.txt")}`, content: "x" },
          },
        ],
      },
      { text: "Done." },
    ],
    // The runtime would allow anything: the boundary is the harness's own.
    answer: () => ({ allow: true }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    // Asked (the orchestrator stops a job at a tool result no request covers), then refused.
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => p.tool),
      ["Read", "Write"],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => r.isError),
      [true, true],
    );
    assert.equal(JSON.stringify(run.model.requests).includes("SPACED-OUTSIDE-SECRET"), false);
    assert.equal(existsSync(path.join(path.dirname(run.workingDir), "planted.txt")), false);
  } finally {
    await removeRun(run);
  }
});

void test("claude-agent-acp: a symlink inside the working directory to a place outside is outside: asked about, refused though allowed", async () => {
  const run = await runHarness({
    harnessOptions: { agent: "claude", tools: TOOLS },
    setup: async ({ workingDir }) => {
      const outside = path.join(path.dirname(workingDir), "outdir");
      await mkdir(outside);
      await writeFile(path.join(outside, "o.txt"), "OUTDIR-SECRET\n");
      await symlink(outside, path.join(workingDir, "linkdir"));
    },
    turns: ({ workingDir }) => [
      { toolCalls: [{ name: "Read", input: { file_path: path.join(workingDir, "linkdir", "o.txt") } }] },
      {
        toolCalls: [
          { name: "Write", input: { file_path: path.join(workingDir, "linkdir", "planted.txt"), content: "x" } },
        ],
      },
      { text: "Done." },
    ],
    // The runtime would allow anything: the boundary is the harness's own.
    answer: () => ({ allow: true }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    // Asked (the orchestrator stops a job at a tool result no request covers), then refused.
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => p.tool),
      ["Read", "Write"],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => r.isError),
      [true, true],
    );
    assert.equal(existsSync(path.join(path.dirname(run.workingDir), "outdir", "planted.txt")), false);
    assert.equal(JSON.stringify(run.model.requests).includes("OUTDIR-SECRET"), false);
    assert.match(run.stderr, /"message":"refused a tool call outside the working directory"/);
  } finally {
    await removeRun(run);
  }
});
