// The acceptance path for model calls: Claude Code → the real LLM proxy →
// the scripted Anthropic API. The proxy meters the session under its job and
// agent, and only the proxy ever holds the provider key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { CUSTODY_KEY, HEADERS, PLANTED_SECRET, ofCase, removeRun, runHarness } from "./harness-run.js";

void test("through the LLM proxy: the session completes, metered under its job and agent, with no provider key in the harness", async () => {
  const run = await runHarness({
    viaProxy: true,
    turns: () => [
      {
        text: "Running it.",
        toolCalls: [{ name: "Bash", input: { command: "echo proxied > out.txt", description: "Write a file" } }],
      },
      { text: "Done." },
    ],
  });
  try {
    assert.equal(
      run.outcome.result?.stopReason,
      StopReason.COMPLETED,
      `${run.outcome.result?.error ?? ""}\n${run.stderr}`,
    );
    assert.equal(run.outcome.result?.text, "Done.");
    assert.equal(await readFile(path.join(run.workingDir, "out.txt"), "utf8"), "proxied\n");
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((a) => a.tool),
      ["Bash"],
    );

    // The proxy metered both calls under the job and the agent.
    const usage = run.usage;
    assert.equal(usage?.job, HEADERS["Oz0-Job"]);
    assert.equal(usage?.total?.calls, 2n);
    assert.deepEqual(
      usage?.agents.map((a) => [a.agent, a.usage?.calls]),
      [[HEADERS["Oz0-Agent"], 2n]],
    );

    // Upstream, the provider key is the proxy's; the key planted in the harness's environment never left it.
    const turns = run.model.requests.filter((r) => !r.sideCall);
    assert.equal(turns.length, 2);
    for (const request of run.model.requests) {
      assert.equal(request.headers["x-api-key"], CUSTODY_KEY);
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false);
    }
  } finally {
    await removeRun(run);
  }
});
