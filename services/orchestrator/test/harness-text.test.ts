// A harness chooses its permission ids, call ids and tool names, up to a
// megabyte each: the messages that name them in the log and a job's stored
// error keep their first 120 characters.
import assert from "node:assert/strict";
import { test } from "node:test";
import { repeatedRequestId, requestIdsOf } from "../src/approvals/request-ids.js";
import { toolResultViolation } from "../src/policy/tool-call-audit.js";
import type { PermissionRecord } from "../src/store/job-store.js";

const huge = (mark: string): string => mark + "x".repeat(1_000_000);

void test("a repeated id of a megabyte is named by its first 120 characters and its length", () => {
  const id = huge("p");
  const ids = requestIdsOf([{ id, callId: "c-1" } as PermissionRecord]);
  const message = repeatedRequestId(ids, { id, callId: "c-2" });
  assert.ok(message);
  assert.match(message, /duplicate_request_id/);
  assert.match(message, /"px{119}… \(1000001 characters\)"/);
  assert.ok(message.length < 1_000, `${message.length} characters`);
  // Short ids are named whole, as before.
  assert.match(
    repeatedRequestId(ids, { id: "p-2", callId: "c-1" })!,
    /permission request "p-2" reuses "c-1" as its call id/,
  );
});

void test("the tool-call audit's messages clip the harness's call id and tool name", () => {
  const callId = huge("c");
  const unasked = toolResultViolation({ result: { callId, isError: false }, permission: undefined, harness: "h" });
  assert.ok(unasked && unasked.length < 1_000, `${unasked?.length} characters`);
  assert.match(unasked, /ran tool call cx{119}… \(1000001 characters\) without asking/);
  const denied = toolResultViolation({
    result: { callId, isError: false },
    permission: {
      id: "p",
      callId,
      tool: huge("t"),
      status: "denied",
      decider: "person",
      reason: "",
    } as PermissionRecord,
    harness: "h",
  });
  assert.ok(denied && denied.length < 1_000, `${denied?.length} characters`);
  assert.match(
    denied,
    /ran tx{119}… \(1000001 characters\) call cx{119}… \(1000001 characters\) although it was denied/,
  );
});
