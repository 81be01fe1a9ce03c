// Runtime tools reach the model through the in-process MCP server and the
// runtime over the protocol, each call asked about first (rule 6); an output
// schema becomes the result's structured output.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { ofCase, removeRun, runHarness } from "./harness-run.js";

void test("a runtime tool call is asked about, goes to the runtime and its result to the model; output_schema fills structured_output", async () => {
  const run = await runHarness({
    request: {
      runtimeTools: [
        {
          name: "lookup",
          description: "Look a key up in the job's notes.",
          inputSchema: { type: "object", properties: { key: { type: "string" } }, required: ["key"] },
        },
      ],
      outputSchema: {
        type: "object",
        properties: { color: { type: "string" }, count: { type: "integer" } },
        required: ["color", "count"],
      },
    },
    turns: () => [
      { toolCalls: [{ name: "mcp__oz0__lookup", input: { key: "color" } }] },
      { toolCalls: [{ name: "StructuredOutput", input: { color: "blue", count: 2 } }] },
    ],
    runtimeTool: (call) => ({ output: fromJson(ValueSchema, { value: `the ${String(call.input?.["key"])} is blue` }) }),
  });
  try {
    assert.equal(
      run.outcome.result?.stopReason,
      StopReason.COMPLETED,
      `${run.outcome.result?.error ?? ""}\n${run.stderr}`,
    );
    assert.deepEqual(run.outcome.result?.structuredOutput, { color: "blue", count: 2 });
    const calls = ofCase(run.events, "runtimeToolCall");
    assert.deepEqual(
      calls.map((c) => [c.name, c.input]),
      [["lookup", { key: "color" }]],
    );
    // The model saw the runtime's answer.
    assert.match(JSON.stringify(run.model.requests.at(-1)?.body?.messages?.at(-1)), /the color is blue/);
    // Offered to the model with its schema.
    const offered = run.model.requests[0]?.body?.tools.find((t: { name: string }) => t.name === "mcp__oz0__lookup");
    assert.deepEqual(offered?.input_schema?.required, ["key"]);
    // Asked about by the runtime's name, tied to its tool call, before it was relayed; StructuredOutput asks nobody.
    const [call] = ofCase(run.events, "toolCall");
    assert.deepEqual(
      ofCase(run.events, "toolCall").map((c) => c.tool),
      ["lookup"],
    );
    const asks = ofCase(run.events, "permissionRequest");
    assert.deepEqual(
      asks.map((a) => [a.tool, a.input, a.callId]),
      [["lookup", { key: "color" }, call?.callId]],
    );
    const kinds = run.events.map((e) => e.event.case);
    assert.ok(kinds.indexOf("permissionRequest") < kinds.indexOf("runtimeToolCall"), kinds.join(", "));
  } finally {
    await removeRun(run);
  }
});
