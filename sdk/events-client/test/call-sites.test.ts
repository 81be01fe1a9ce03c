// The reader test/producers.test.ts relies on: it counts what a producer
// sends, passes over what only forwards or looks up, and reports a send that
// could be any type.
import assert from "node:assert/strict";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { lifecycleSends } from "./support/lifecycle-call-sites.js";

const fixture = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "producer.ts");

void test("literals, conditionals, template literals and as-const lookups are sends; forwarding and Map.get are not", () => {
  const { sent, unresolved } = lifecycleSends([fixture]);
  assert.deepEqual([...sent.keys()].sort(), [
    "approval.requested",
    "graph.run_cancelled",
    "graph.run_completed",
    "harness.operation_failed",
    "harness.operation_timed_out",
    "job.created",
    "permission.decided",
    "tool.called",
  ]);
  assert.deepEqual(
    sent.get("tool.called")?.map((s) => s.text),
    ['"tool.called"'],
  );
  assert.deepEqual(
    unresolved.map((s) => [path.basename(s.file), s.text]),
    [["producer.ts", "anyType"]],
  );
});
