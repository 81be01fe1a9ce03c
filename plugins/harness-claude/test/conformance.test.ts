// The plugin passes the harness conformance kit with the real Claude Code
// binary: the same check `oz0-harness-conformance -- node dist/main.js` runs.
// It speaks the Anthropic route only (it refuses other providers' models), so
// the kit's default --route auto tests it there and says so.
import { test } from "node:test";
import assert from "node:assert/strict";
import { runConformance } from "@oz0/harness/testing";
import { MAIN } from "./harness-run.js";

void test("passes every conformance case, none skipped, on the Anthropic route", async () => {
  const report = await runConformance({ command: [process.execPath, MAIN] });
  const failures = report.cases.filter((c) => c.status !== "passed").map((c) => `${c.id} (${c.status}): ${c.message}`);
  assert.deepEqual(failures, []);
  assert.equal(report.ok, true);
  assert.deepEqual(report.capabilities, {
    permissions: true,
    runtimeTools: true,
    structuredOutput: true,
    streamingText: true,
  });
  assert.deepEqual(report.routes, ["anthropic"]);
  assert.deepEqual(
    report.untestedRoutes.map((r) => r.route),
    ["openai"],
  );
  assert.match(report.untestedRoutes[0]?.reason ?? "", /made no model call \(it ended STOP_REASON_ERROR: .*openai/);
});
