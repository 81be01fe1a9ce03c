// A second ACP agent (fixtures/scripted-acp-agent.ts, on the ACP SDK's agent
// side) calling the scripted model through the session's endpoint: the
// adapter is not just a claude-agent-acp adapter.
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { PermissionAnswer_Outcome, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { toJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { HEADERS, PLANTED_SECRET, TOKEN, fixtureAgent, ofCase, removeRun, runHarness } from "./harness-run.js";

const AGENT = fixtureAgent("scripted-acp-agent.ts");

void test("an approved call runs, a denied one does not and its reason reaches the model; every call carries the headers", async () => {
  const run = await runHarness({
    harnessOptions: AGENT,
    turns: () => [
      { text: "Writing a.", toolCalls: [{ name: "write_file", input: { path: "a.txt", content: "A" } }] },
      { text: "Writing b.", toolCalls: [{ name: "write_file", input: { path: "b.txt", content: "B" } }] },
      { text: "Done." },
    ],
    answer: (request) =>
      request.input?.["path"] === "b.txt" ? { allow: false, reason: "Policy: no b.txt" } : { allow: true },
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, `${run.outcome.result?.error}\n${run.stderr}`);
    assert.equal(run.outcome.result?.text, "Done.");
    assert.equal(await readFile(path.join(run.workingDir, "a.txt"), "utf8"), "A");
    assert.equal(existsSync(path.join(run.workingDir, "b.txt")), false);
    assert.deepEqual(
      ofCase(run.events, "permissionRequest").map((p) => [p.tool, p.callId, p.input?.["path"]]),
      [
        ["write_file", "toolu_scripted_1_0", "a.txt"],
        ["write_file", "toolu_scripted_2_0", "b.txt"],
      ],
    );
    // Each tool call is announced before its permission request, and finished once.
    const kinds = run.events
      .map((e) => e.event.case)
      .filter((c) => c === "toolCall" || c === "permissionRequest" || c === "toolResult");
    assert.deepEqual(kinds, [
      "toolCall",
      "permissionRequest",
      "toolResult",
      "toolCall",
      "permissionRequest",
      "toolResult",
    ]);
    const results = ofCase(run.events, "toolResult");
    assert.deepEqual(
      results.map((r) => [r.isError, toJson(ValueSchema, r.output!)]),
      [
        [
          false,
          {
            status: "completed",
            kind: "edit",
            title: "write_file a.txt",
            text: "wrote a.txt",
            files: [path.join(run.workingDir, "a.txt")],
          },
        ],
        [
          true,
          { status: "failed", kind: "edit", title: "write_file b.txt", text: "Permission denied: Policy: no b.txt" },
        ],
      ],
    );
    assert.match(JSON.stringify(run.model.requests[2]?.body), /Permission denied: Policy: no b\.txt/);
    for (const request of run.model.requests) {
      assert.equal(request.headers["oz0-job"], HEADERS["Oz0-Job"]);
      assert.equal(request.headers["oz0-agent"], HEADERS["Oz0-Agent"]);
      assert.equal(request.headers["x-api-key"], TOKEN);
      assert.equal(JSON.stringify(request).includes(PLANTED_SECRET), false);
    }
    // The agent's running cost, as usage deltas that add up.
    const cost = run.outcome.result?.usage.reduce((sum, u) => sum + u.costUsd, 0) ?? 0;
    assert.ok(cost > 0);
  } finally {
    await removeRun(run);
  }
});

void test("a call approved with a changed input is refused with a reason (ACP cannot run another input)", async () => {
  const run = await runHarness({
    harnessOptions: AGENT,
    turns: () => [{ toolCalls: [{ name: "write_file", input: { path: "asked.txt", content: "x" } }] }, { text: "OK." }],
    answer: () => ({ allow: true, input: { path: "changed.txt", content: "y" } }),
  });
  try {
    assert.equal(run.outcome.result?.stopReason, StopReason.COMPLETED, run.stderr);
    assert.equal(existsSync(path.join(run.workingDir, "asked.txt")), false);
    assert.equal(existsSync(path.join(run.workingDir, "changed.txt")), false);
    assert.match(
      JSON.stringify(run.model.requests[1]?.body),
      /approved only with a changed input, which this ACP agent cannot run/,
    );
  } finally {
    await removeRun(run);
  }
});

void test("SIGTERM while a permission waits: the agent gets session/cancel and the pending request `cancelled`, one cancelled result", async () => {
  const run = await runHarness({
    harnessOptions: AGENT,
    turns: () => [
      { toolCalls: [{ name: "write_file", input: { path: "late.txt", content: "x" } }] },
      { text: "never" },
    ],
    answer: () => undefined,
    onEvent: (event, session) => {
      if (event.event.case === "permissionRequest") session.cancel("the job was cancelled");
    },
  });
  try {
    assert.equal(run.outcome.status, "cancelled");
    assert.equal(run.outcome.result?.stopReason, StopReason.CANCELLED, run.stderr);
    assert.equal(ofCase(run.events, "result").length, 1);
    assert.equal(existsSync(path.join(run.workingDir, "late.txt")), false);
    assert.equal(run.model.requests.length, 1);
    assert.equal(run.outcome.leftoverProcesses, false);
    // The agent got `cancelled` for its permission request and ended its turn the same way.
    assert.match(run.stderr, /"message":"the prompt turn ended","stopReason":"cancelled","cancelled":true/);
  } finally {
    await removeRun(run);
  }
});

void test("a timed-out permission is answered `cancelled`, which ends the agent's turn", async () => {
  const run = await runHarness({
    harnessOptions: AGENT,
    turns: () => [{ toolCalls: [{ name: "write_file", input: { path: "slow.txt", content: "x" } }] }],
    answer: () => ({ allow: false, outcome: PermissionAnswer_Outcome.TIMED_OUT, reason: "nobody answered" }),
  });
  try {
    // The fixture agent, like claude-agent-acp, ends its turn on a cancelled permission.
    assert.equal(run.outcome.result?.stopReason, StopReason.CANCELLED, run.stderr);
    assert.equal(existsSync(path.join(run.workingDir, "slow.txt")), false);
  } finally {
    await removeRun(run);
  }
});
