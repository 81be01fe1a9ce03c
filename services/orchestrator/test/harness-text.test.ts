// A harness chooses its call ids and tool names, up to a megabyte each (a
// permission id longer than 256 characters is refused, and named): the
// messages that name them in the log and a job's stored error keep their
// first 120 characters.
import assert from "node:assert/strict";
import { test } from "node:test";
import { requestIdViolation, requestIdsOf } from "../src/approvals/request-ids.js";
import { toolResultViolation } from "../src/policy/tool-call-audit.js";
import type { PermissionRecord } from "../src/store/job-store.js";

const huge = (mark: string): string => mark + "x".repeat(1_000_000);

void test("an id of a megabyte is refused, named by its first 120 characters and its length", () => {
  const id = huge("p");
  const ids = requestIdsOf([{ id: "p-1", callId: "c-1" } as PermissionRecord]);
  const message = requestIdViolation(ids, { id, callId: "c-2" });
  assert.ok(message);
  assert.match(
    message,
    /invalid_event: permission request "px{119}… \(1000001 characters\)": its id has 1000001 characters, more than 256/,
  );
  assert.ok(message.length < 1_000, `${message.length} characters`);
  // Short ids are named whole, as before.
  assert.match(
    requestIdViolation(ids, { id: "p-2", callId: "c-1" })!,
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
