// The LLM proxy's refusals at limits.max_steps and at the budget, read from an
// agent's error text as Claude Code writes them (src/harness/proxy-refusals.ts);
// harness-claude and harness-acp run the real Claude Code against them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { proxyRefusal, StopReason } from "@oz0/harness";

void test("a refusal is read in the forms Claude Code writes it: the proxy's body (either API's shape) or its message alone", () => {
  const maxSteps =
    "the session has made 3 model calls, the most it may make (3, its agent's limits.max_steps); the session must end (an operator raises it with the agent's limits.max_steps)";
  const forms = [
    `API Error: 402 ${JSON.stringify({ type: "error", error: { type: "model_calls_exhausted", message: maxSteps } })}`,
    `API Error: 402 ${JSON.stringify({ error: { message: maxSteps, type: "model_calls_exhausted", code: "model_calls_exhausted" } })}`,
    `API Error: 402 ${maxSteps}`,
  ];
  for (const form of forms)
    assert.deepEqual(proxyRefusal(`the ACP agent answered session/prompt with an error: Internal error: ${form}`), {
      stopReason: StopReason.MAX_TURNS,
      error: `the LLM proxy refused the next model call: ${maxSteps}`,
    });
  // A 402 of another type, or another status, is not a limit the agent set.
  assert.equal(
    proxyRefusal(`API Error: 402 ${JSON.stringify({ error: { type: "invalid_request_error", message: maxSteps } })}`),
    undefined,
  );
  assert.equal(proxyRefusal(`API Error: 400 ${maxSteps}`), undefined);
});
