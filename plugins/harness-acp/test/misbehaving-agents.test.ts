// Bad input from the agent ends the session with a specific error, never a
// hang: each case is a small raw-JSON-lines agent (fixtures/misbehaving-acp-agent.ts).
import { test } from "node:test";
import assert from "node:assert/strict";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { fixtureAgent, ofCase, removeRun, runHarness } from "./harness-run.js";

const CASES: Array<{ mode: string; stopReason: StopReason; error: RegExp }> = [
  {
    mode: "malformed",
    stopReason: StopReason.ERROR,
    error:
      /^the ACP agent wrote a stdout line that is not a JSON-RPC 2\.0 message \(it is not JSON\): "this is not JSON-RPC"$/,
  },
  {
    mode: "unknown-update",
    stopReason: StopReason.ERROR,
    error: /^the agent sent a session\/update of unknown kind "telepathy_update"/,
  },
  {
    mode: "unannounced-permission",
    stopReason: StopReason.ERROR,
    error: /^the agent asked permission for tool call "ghost-1", which it never announced/,
  },
  {
    mode: "exit-mid-prompt",
    stopReason: StopReason.ERROR,
    error: /^the ACP agent exited with code 3 before the prompt turn ended$/,
  },
  {
    mode: "old-protocol",
    stopReason: StopReason.ERROR,
    error: /^the ACP agent speaks protocol version 0; this harness speaks version 1$/,
  },
  {
    mode: "prompt-error",
    stopReason: StopReason.ERROR,
    error: /^the ACP agent answered session\/prompt with an error: the model is on fire$/,
  },
  { mode: "stop:refusal", stopReason: StopReason.REFUSED, error: /refused/ },
  { mode: "stop:max_turn_requests", stopReason: StopReason.MAX_TURNS, error: /turn limit/ },
  { mode: "stop:max_tokens", stopReason: StopReason.ERROR, error: /cut off at its output token limit/ },
  { mode: "answer-and-exit", stopReason: StopReason.COMPLETED, error: /^$/ },
  // Counts the protocol cannot carry are 0 (and logged): the finished turn is not failed for them.
  { mode: "odd-usage", stopReason: StopReason.COMPLETED, error: /^$/ },
  {
    mode: "unasked-run",
    stopReason: StopReason.ERROR,
    error:
      /^the agent reported tool call "run-1" \(execute\) as completed without asking permission for it; this harness lets no tool call run unless the runtime allowed it: run the agent in a mode that asks before every tool call$/,
  },
  {
    mode: "reuse-call-id",
    stopReason: StopReason.ERROR,
    error:
      /^the agent announced tool call "c1" again after it finished \(completed\); tool call ids must be unique in a session: a call reusing an id would run unasked and unseen/,
  },
  {
    mode: "mode-switch",
    stopReason: StopReason.ERROR,
    error:
      /^the agent switched to session mode "yolo" from "default"; this harness runs agents only in the mode that asks/,
  },
  {
    mode: "start-yolo",
    stopReason: StopReason.ERROR,
    error:
      /^the agent started the session in mode "yolo", which runs tool calls without asking, and offers no "default" mode/,
  },
  {
    mode: "config-yolo",
    stopReason: StopReason.ERROR,
    error:
      /^the agent started the session in mode "yolo", which runs tool calls without asking; .*make the agent start in one$/,
  },
  // session/set_mode puts it back in `default` before the prompt.
  { mode: "start-bypass", stopReason: StopReason.COMPLETED, error: /^$/ },
];

/** Modes that end the session before the prompt, so the agent says nothing. */
const SILENT = new Set(["old-protocol", "start-yolo", "config-yolo"]);

for (const { mode, stopReason, error } of CASES) {
  void test(`an agent that does ${mode} ends the session with ${StopReason[stopReason]}`, async () => {
    const run = await runHarness({
      harnessOptions: fixtureAgent("misbehaving-acp-agent.ts", { env: { BAD_AGENT_MODE: mode } }),
      turns: () => [],
    });
    try {
      const result = run.outcome.result;
      assert.equal(run.outcome.error, undefined, `${run.outcome.error?.message}\n${run.stderr}`);
      assert.equal(result?.stopReason, stopReason, `${result?.error}\n${run.stderr}`);
      assert.match(result?.error ?? "", error);
      // Whatever the agent said before it misbehaved still reached the stream.
      if (mode === "unasked-run") assert.deepEqual(ofCase(run.events, "toolResult"), []);
      if (mode === "odd-usage") {
        const usage = ofCase(run.events, "usage").map((u) => [
          u.inputTokens,
          u.outputTokens,
          u.cacheReadTokens,
          u.reasoningTokens,
        ]);
        assert.deepEqual(usage, [[0n, 0n, 0n, 7n]]);
      }
      assert.deepEqual(
        ofCase(run.events, "text").map((t) => t.text),
        ["Starting."].slice(0, SILENT.has(mode) ? 0 : 1),
      );
      assert.equal(run.outcome.leftoverProcesses, false);
    } finally {
      await removeRun(run);
    }
  });
}

void test("a permission request that overtakes its call's announcement waits for it: the call runs under the tool's own name", async () => {
  const run = await runHarness({
    harnessOptions: fixtureAgent("misbehaving-acp-agent.ts", { env: { BAD_AGENT_MODE: "permission-first" } }),
    turns: () => [],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.deepEqual(
      ofCase(run.events, "toolCall").map((c) => [c.callId, c.tool]),
      [["pf-1", "Bash"]],
    );
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => [p.callId, p.tool]),
      [["pf-1", "Bash"]],
    );
    assert.deepEqual(
      ofCase(run.events, "toolResult").map((r) => [r.callId, r.isError]),
      [["pf-1", false]],
    );
  } finally {
    await removeRun(run);
  }
});

void test("wrong harness options end the session at once with an error naming the option", async () => {
  const run = await runHarness({ harnessOptions: { agent: { command: "claude-agent-acp" } }, turns: () => [] });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
    assert.equal(
      run.outcome.result?.error,
      'invalid harness options for acp: harness.agent.command: must be a non-empty list of strings (program, then arguments), got "claude-agent-acp"',
    );
  } finally {
    await removeRun(run);
  }
});

void test("an agent command that does not exist is a clear error", async () => {
  const run = await runHarness({ harnessOptions: { agent: { command: ["oz0-no-such-acp-agent"] } }, turns: () => [] });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
    assert.match(
      run.outcome.result?.error ?? "",
      /^could not start the ACP agent: "oz0-no-such-acp-agent" is not an executable on the agent's PATH$/,
    );
  } finally {
    await removeRun(run);
  }
});

void test("an agent that ignores session/cancel is ended after the grace, with one cancelled result", async () => {
  const run = await runHarness({
    harnessOptions: fixtureAgent("misbehaving-acp-agent.ts", { env: { BAD_AGENT_MODE: "ignore-cancel" } }),
    turns: () => [],
    onEvent: (event, session) => {
      if (event.event.case === "text") session.cancel("the test cancels");
    },
  });
  try {
    assert.equal(run.outcome.status, "cancelled");
    assert.equal(run.outcome.result?.stopReason, StopReason.CANCELLED, run.stderr);
    assert.equal(ofCase(run.events, "result").length, 1);
    assert.equal(run.outcome.leftoverProcesses, false);
  } finally {
    await removeRun(run);
  }
});
