// A tool call's row shows the input its permission was asked and answered
// for, not the one its tool_call announced: a harness writes both, nothing
// makes them agree, and the row said "allowed by owner" under an input the
// owner never saw (the tool_call's, or one announced again after the answer)
// (attacker review).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { JobEventSchema, type JobEvent } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { fold, type ToolRow } from "../src/transcript.js";

let seq = 0n;
const event = (value: MessageInitShape<typeof JobEventSchema>["event"]): JobEvent =>
  create(JobEventSchema, { seq: ++seq, event: value });
const announced = (input: JsonObject) =>
  event({ case: "toolCall", value: { callId: "c1", tool: "Bash", input, title: "" } });
const asked = (input: JsonObject) =>
  event({ case: "permissionRequested", value: { id: "p1", callId: "c1", tool: "Bash", input, title: "" } });
const allowed = event({
  case: "permissionDecision",
  value: { id: "p1", callId: "c1", tool: "Bash", allow: true, answeredBy: "owner" },
});

const rowOf = (events: JobEvent[]): ToolRow => {
  const rows = fold(events).rows.filter((r): r is ToolRow => r.kind === "tool");
  assert.equal(rows.length, 1);
  return rows[0]!;
};

void test("an asked call's row shows the input it was asked about, and the announced one beside it when they differ", () => {
  const row = rowOf([announced({ command: "ls" }), asked({ command: "rm -rf ~" }), allowed]);
  assert.deepEqual(row.input, { command: "rm -rf ~" });
  assert.deepEqual(row.announcedInput, { command: "ls" });
});

void test("a tool_call announced again after the answer does not rewrite the input that was allowed", () => {
  const row = rowOf([
    announced({ command: "rm -rf ~" }),
    asked({ command: "rm -rf ~" }),
    allowed,
    announced({ command: "ls" }),
  ]);
  assert.deepEqual(row.input, { command: "rm -rf ~" });
  assert.deepEqual(row.announcedInput, { command: "ls" });
});

void test("a call that asked nobody shows its announced input, and one announced as asked shows no second input", () => {
  assert.deepEqual(rowOf([announced({ command: "ls" })]).input, { command: "ls" });
  const same = rowOf([announced({ command: "ls" }), asked({ command: "ls" }), allowed]);
  assert.deepEqual(same.input, { command: "ls" });
  assert.equal(same.announcedInput, undefined);
});
