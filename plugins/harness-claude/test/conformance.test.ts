// The plugin passes the harness conformance kit with the real Claude Code
// binary: the same check `oz0-harness-conformance -- node dist/main.js` runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runConformance } from "@oz0/harness/testing";
import { MAIN } from "./harness-run.js";

/**
 * Cases this harness fails for now, and why (the kit fails the run when one starts passing):
 * - runtime-tool-permission: runtime tools "ask nobody" here (permission-gate.ts), but rule 6 asks before
 *   every tool call, the orchestrator answers a permission request for a tool it serves itself, and its
 *   audit takes a tool_result no permission request covers for a policy bypass.
 */
const EXPECTED_FAILURES = ["runtime-tool-permission"];

void test("passes every conformance case, none skipped", async () => {
  const report = await runConformance({ command: [process.execPath, MAIN], expectedFailures: EXPECTED_FAILURES });
  const failures = report.cases.filter((c) => c.status !== "passed" && c.status !== "expected_failure").map((c) => `${c.id} (${c.status}): ${c.message}`);
  assert.deepEqual(failures, []);
  assert.equal(report.ok, true);
  assert.deepEqual(report.capabilities, { permissions: true, runtimeTools: true, structuredOutput: true, streamingText: true });
});
