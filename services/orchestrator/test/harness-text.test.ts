// A harness chooses its call ids and tool names, up to a megabyte each (a
// permission id longer than 256 characters is refused, and named): the
// messages that name them in the log and a job's stored error keep their
// first 120 characters.
import assert from "node:assert/strict";
import { test } from "node:test";
import { requestIdViolation, requestIdsOf } from "../src/approvals/request-ids.js";
import { toolListStage, type PermissionQuestion } from "../src/policy/permission-policy.js";
import { toolResultViolation } from "../src/policy/tool-call-audit.js";
import type { AgentVersionRecord, PermissionRecord } from "../src/store/job-store.js";

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

/** What a terminal, a log line or a reader acts on: no message the orchestrator writes may hold one raw. */
// eslint-disable-next-line no-control-regex -- the control characters are what it looks for
const ACTIVE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

void test("a harness's call ids and tool names are inert in the messages that name them: escapes, line breaks and bidirectional controls are written as \\u escapes", () => {
  // Clears the screen, writes the clipboard (OSC 52), starts a forged log line, shows the rest reversed.
  const callId = "c\u001b[2J\u001b]52;c;ZXZpbA==\u0007\nINFO approved by alice\u202etxt.exe";
  const unasked = toolResultViolation({ result: { callId, isError: false }, permission: undefined, harness: "h" })!;
  assert.doesNotMatch(unasked, ACTIVE);
  assert.ok(
    unasked.includes(
      String.raw`tool call c\u001b[2J\u001b]52;c;ZXZpbA==\u0007\u000aINFO approved by alice\u202etxt.exe without asking`,
    ),
    unasked,
  );
  const denied = toolResultViolation({
    result: { callId: "c-1", isError: false },
    permission: {
      id: "p",
      callId: "c-1",
      tool: "rm\u2028-rf",
      status: "denied",
      decider: "person",
      reason: "",
    } as PermissionRecord,
    harness: "h",
  })!;
  assert.ok(denied.includes(String.raw`ran rm\u2028-rf call c-1 although it was denied`), denied);
  // A refused id, and the ids a repeat names (one stored before the rule refused such ids), quoted as JSON and inert.
  const ids = requestIdsOf([{ id: "p\u0085", callId: "c-1" } as PermissionRecord]);
  const refused = requestIdViolation(ids, { id: "p\u202e1", callId: "" })!;
  assert.doesNotMatch(refused, ACTIVE);
  assert.match(refused, /permission request "p\\u202e1": its id has a bidirectional control \(U\+202E\) in it/);
  const repeat = requestIdViolation(ids, { id: "p-2", callId: "c-1" })!;
  assert.doesNotMatch(repeat, ACTIVE);
  assert.match(repeat, /reuses "c-1" as its call id, the call id of permission request "p\\u0085"/);
});

void test("a tool outside harness.tools is refused with its name clipped and inert in the reason", async () => {
  const agent = { definition: { harness: { tools: ["read_file"] } } } as unknown as AgentVersionRecord;
  const decision = await toolListStage.decide({
    agent,
    tool: `${huge("t")}\u001b[2J`,
    input: {},
  } as PermissionQuestion);
  assert.equal(decision?.kind, "deny");
  assert.match(
    decision!.reason,
    /^tool tx{119}… \(1000005 characters\) is not in this agent's harness\.tools \(read_file\)/,
  );
  const inert = await toolListStage.decide({
    agent,
    tool: "rm\u202e-rf",
    input: {},
  } as PermissionQuestion);
  assert.match(inert!.reason, /^tool rm\\u202e-rf is not/);
});
