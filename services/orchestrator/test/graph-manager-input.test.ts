// What a graph's manager agent is given: its job's input must be one the job
// runner takes (MAX_JOB_INPUT_BYTES), however large the run's bag grew.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { ControlEvent } from "@oz0/graph";
import { managerInput } from "../src/graphs/graph-manager-agent.js";
import { checkJobInput, MAX_JOB_INPUT_BYTES } from "../src/jobs/job-input.js";

void test("a bag of megabytes still makes a manager input the job runner takes, cut where it is long", () => {
  const huge = "é".repeat(3 * 1024 * 1024);
  const snapshot: Record<string, unknown> = {
    prompt: "fix the flaky test",
    apiKey: "[secret]",
    // A coder agent's output: the previous step's whole reply.
    output: huge,
    verdict: "again",
    rows: Array.from({ length: 100_000 }, (_, i) => ({ i })),
  };
  // Many keys of a custom step, each short.
  for (let i = 0; i < 20_000; i++) snapshot[`key_${i}`] = "v".repeat(100);
  const event: ControlEvent = {
    kind: "step_error",
    runId: "graph_1",
    graph: "code",
    nodeId: "agent:reviewer",
    path: "/0/1/until/0",
    iteration: 1,
    attempt: 1,
    error: { code: "STEP_FAILED", message: "the reviewer failed" },
    snapshot,
  };
  const input = managerInput(event);
  // Before, the whole bag went in: a job input of 6 MiB, which the job runner refuses, so no event could be decided.
  assert.ok(Buffer.byteLength(input) <= MAX_JOB_INPUT_BYTES, `${Buffer.byteLength(input)} bytes`);
  checkJobInput(input);
  assert.match(input, /"verdict": "again"/);
  assert.match(input, /"apiKey": "\[secret\]"/);
  assert.match(input, /"output": "é{10}[^"]*… \(cut: 3145728 characters in all\)"/);
  assert.match(input, /"rows": "\[not shown: \d+ characters of JSON\]"/);
  assert.match(input, /\(\d+ more keys are not shown: the bag is larger than a decision needs\.\)/);
  // A bag that fits is shown whole, as before.
  const small = managerInput({ ...event, snapshot: { prompt: "p", output: "short" } });
  assert.match(small, /\{\n {2}"prompt": "p",\n {2}"output": "short"\n\}$/);
});
