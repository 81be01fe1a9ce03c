// A text row's label and style come from the roles the protocol names, not
// from the harness's free text: a job labelled its words `tool` and
// `state approval` and the page showed them as a tool call and an approval
// (attacker review).
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { fold } from "../src/transcript.js";

const said = (itemId: string, role: string) =>
  create(JobEventSchema, { seq: 1n, event: { case: "text", value: { itemId, text: "words", delta: false, role } } });

void test("a text row is assistant, thinking or the graph's, whatever role the harness wrote", () => {
  const roles = (itemId: string, role: string) =>
    fold([said(itemId, role)]).rows.map((row) => (row.kind === "text" ? row.role : row.kind));
  assert.deepEqual(roles("i1", ""), ["assistant"]);
  assert.deepEqual(roles("i1", "assistant"), ["assistant"]);
  assert.deepEqual(roles("i1", "thinking"), ["thinking"]);
  assert.deepEqual(roles("graph", ""), ["graph"], "the graph's own lines");
  for (const forged of ["tool", "state approval", "graph", "user", 'x" onclick="y'])
    assert.deepEqual(roles("i1", forged), ["assistant"], forged);
});
