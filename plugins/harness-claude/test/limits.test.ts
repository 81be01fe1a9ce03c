// How sessions end other than by completing: turn limit, budget, cancellation
// and refused options, with the real Claude Code binary where it runs at all.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { ofCase, removeRun, runHarness } from "./harness-run.js";

const runBash = { toolCalls: [{ name: "Bash", input: { command: "true", description: "Nothing" } }] };

/** Processes whose environment mentions `needle` (the session's state directory). */
function processesMentioning(needle: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${entry}/environ`, "latin1").includes(needle)) found.push(Number(entry));
    } catch {
      // gone already, or not ours to read
    }
  }
  return found;
}

void test("limits.max_turns stops the session with max_turns; system_prompt replace sends only the instructions", async () => {
  const run = await runHarness({
    request: {
      limits: { maxTurns: 1 },
      harnessOptions: { system_prompt: "replace" },
      instructions: "You are a terse release bot.",
    },
    turns: () => [runBash, runBash, { text: "never reached" }],
  });
  try {
    assert.equal(run.outcome.status, "completed", run.stderr);
    assert.equal(run.outcome.result?.stopReason, StopReason.MAX_TURNS, run.outcome.result?.error);
    assert.match(run.outcome.result?.error ?? "", /maximum number of turns \(1\)/);
    const turns = run.model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 1);
    const system = JSON.stringify(turns[0]?.body?.system);
    assert.match(system, /You are a terse release bot\./);
    assert.doesNotMatch(system, /You are an agent/);
  } finally {
    await removeRun(run);
  }
});

void test("harness.max_budget_usd stops the session with budget_exhausted", async () => {
  const run = await runHarness({
    request: { harnessOptions: { max_budget_usd: 0.01 } },
    turns: () => [{ ...runBash, usage: { input: 5_000_000, output: 10 } }, runBash, { text: "never reached" }],
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.BUDGET_EXHAUSTED, run.outcome.result?.error);
    assert.match(run.outcome.result?.error ?? "", /budget/);
    assert.equal(run.model.requests.filter((r) => !r.sideCall).length, 1);
  } finally {
    await removeRun(run);
  }
});

/** The LLM proxy's refusal of a call, as it answers (services/llm-proxy: model-call-ledger.ts, budget-ledger.ts). */
const proxyRefusal = (message: string, type: string) => ({
  fail: { status: 402, headers: { "x-should-retry": "false" }, body: { type: "error", error: { type, message } } },
});

// Claude Code reports a refused call as a failed one ("API Error: 402 …"): the session ended with an error, though
// it reached a limit the agent set, as the SDK's own limits end it.
void test("the LLM proxy's refusals at limits.max_steps and at the budget end the session with max_turns and budget_exhausted", async () => {
  const cases = [
    {
      refusal: proxyRefusal(
        "the session has made 1 model calls, the most it may make (1, its agent's limits.max_steps); the session must end (an operator raises it with the agent's limits.max_steps)",
        "model_calls_exhausted",
      ),
      stopReason: StopReason.MAX_TURNS,
    },
    {
      refusal: proxyRefusal(
        "the session's budget of $0.0100 is exhausted ($0.0100 spent, $0.0000 held by calls in flight); the session must end (an operator raises it with the agent's harness.max_budget_usd)",
        "budget_exhausted",
      ),
      stopReason: StopReason.BUDGET_EXHAUSTED,
    },
    // Any other refusal is a failed model call, as before.
    { refusal: proxyRefusal("something else went wrong", "invalid_request_error"), stopReason: StopReason.ERROR },
  ];
  for (const { refusal, stopReason } of cases) {
    const run = await runHarness({ turns: () => [runBash, refusal, { text: "never reached" }] });
    try {
      assert.equal(run.outcome.result?.stopReason, stopReason, run.outcome.result?.error);
      const message = refusal.fail.body.error.message;
      assert.ok(run.outcome.result?.error.endsWith(message), run.outcome.result?.error);
    } finally {
      await removeRun(run);
    }
  }
});

void test("SIGTERM while the model is answering ends with one cancelled result and no process left", async () => {
  let cancelling = false;
  const run = await runHarness({
    // A model that never answers (and holds no timer that would keep the test alive).
    turns: () => () => new Promise<never>(() => {}),
    onEvent: (event, session, model) => {
      if (event.event.case !== "started" || cancelling) return;
      cancelling = true;
      // Cancel once Claude Code is waiting on the model, as a job cancelled mid-turn would be.
      const poll = setInterval(() => {
        if (model.requests.length === 0) return;
        clearInterval(poll);
        session.cancel("the job was cancelled");
      }, 20);
    },
  });
  try {
    assert.equal(run.outcome.status, "cancelled");
    assert.equal(run.outcome.result?.stopReason, StopReason.CANCELLED, run.stderr);
    assert.equal(run.events.filter((e) => e.event.case === "result").length, 1);
    assert.equal(run.outcome.leftoverProcesses, false);
    assert.deepEqual(processesMentioning(run.stateDir), []);
  } finally {
    await removeRun(run);
  }
});

void test("bad harness options end the session with an error naming each option, before Claude Code starts", async () => {
  const run = await runHarness({
    request: { harnessOptions: { tools: ["Read", "WebFetch"], permission_mode: "yolo" } },
    turns: () => [{ text: "never reached" }],
  });
  try {
    assert.equal(run.outcome.status, "completed", run.stderr);
    assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
    assert.match(run.outcome.result?.error ?? "", /harness\.tools: WebFetch is not supported/);
    assert.match(
      run.outcome.result?.error ?? "",
      /harness\.permission_mode: must be one of default, acceptEdits, plan, bypassPermissions, got "yolo"/,
    );
    assert.equal(run.model.requests.length, 0);
    assert.equal(ofCase(run.events, "toolCall").length, 0);
  } finally {
    await removeRun(run);
  }
});

void test("a model of another provider is refused with a clear error", async () => {
  const run = await runHarness({ request: { model: { primary: "openai/gpt-4o" } }, turns: () => [] });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.ERROR);
    assert.match(run.outcome.result?.error ?? "", /openai\/gpt-4o is not an Anthropic model/);
    assert.equal(run.model.requests.length, 0);
  } finally {
    await removeRun(run);
  }
});
