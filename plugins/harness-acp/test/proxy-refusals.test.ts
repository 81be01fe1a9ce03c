// The LLM proxy refuses a session's call past its agent's limits.max_steps and past its budget with a 402
// (services/llm-proxy, "Model calls" and "Budgets"). claude-agent-acp runs the real Claude Code, which does not
// retry it and ends its turn with "API Error: 402 <the proxy's message>"; the agent answers session/prompt with
// that as a JSON-RPC error. The session then reached a limit its agent set, as harness-claude reports it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { removeRun, runHarness } from "./harness-run.js";

/** The LLM proxy's refusal of a call, as it answers (services/llm-proxy: model-call-ledger.ts, budget-ledger.ts). */
const refusalTurn = (message: string, type: string) => ({
  fail: { status: 402, headers: { "x-should-retry": "false" }, body: { type: "error", error: { type, message } } },
});

void test("claude-agent-acp: the LLM proxy's refusals at limits.max_steps and at the budget end the session with max_turns and budget_exhausted", async () => {
  const cases = [
    {
      refusal: refusalTurn(
        "the session has made 3 model calls, the most it may make (3, its agent's limits.max_steps); the session must end (an operator raises it with the agent's limits.max_steps)",
        "model_calls_exhausted",
      ),
      stopReason: StopReason.MAX_TURNS,
    },
    {
      refusal: refusalTurn(
        "the session's budget of $0.0100 is exhausted ($0.0100 spent, $0.0000 held by calls in flight); the session must end (an operator raises it with the agent's harness.max_budget_usd)",
        "budget_exhausted",
      ),
      stopReason: StopReason.BUDGET_EXHAUSTED,
    },
    {
      refusal: refusalTurn(
        "this call could cost up to $0.4800 but only $0.0100 of the session's $1.0000 budget is left (a call holds its worst case, its max_tokens at the model's price, until it ends); lower max_tokens or stream the call",
        "budget_exhausted",
      ),
      stopReason: StopReason.BUDGET_EXHAUSTED,
    },
    // Any other refusal is a failed model call, as before.
    { refusal: refusalTurn("something else went wrong", "invalid_request_error"), stopReason: StopReason.ERROR },
  ];
  for (const { refusal, stopReason } of cases) {
    const run = await runHarness({ harnessOptions: { agent: "claude" }, turns: () => () => refusal });
    try {
      const result = run.outcome.result;
      assert.equal(result?.stopReason, stopReason, `${result?.error}\n${run.stderr.slice(-2000)}`);
      assert.ok(result?.error.includes(refusal.fail.body.error.message), result?.error);
      if (stopReason !== StopReason.ERROR) assert.match(result!.error, /^the LLM proxy refused the next model call: /);
    } finally {
      await removeRun(run);
    }
  }
});
