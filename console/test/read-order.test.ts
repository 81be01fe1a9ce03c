import assert from "node:assert/strict";
import { test } from "node:test";
import { ReadOrder } from "../src/read-order.js";

void test("under a flood of changes, each answer newer than the one shown is shown", () => {
  // Reads 1..4 start before any answers (changes arrive faster than reads finish);
  // they answer out of order. The page must not wait for the flood to end.
  const order = new ReadOrder();
  const reads = [order.start(), order.start(), order.start(), order.start()];
  assert.equal(order.show(reads[1]!), true, "read 2 answers first: shown although reads 3 and 4 are running");
  assert.equal(order.show(reads[0]!), false, "read 1 answers after read 2 was shown: older, not shown");
  assert.equal(order.show(reads[3]!), true, "read 4 is newer than read 2");
  assert.equal(order.show(reads[2]!), false, "read 3 is older than read 4, already shown");
});

void test("only the latest read started schedules the next timed read", () => {
  const order = new ReadOrder();
  const first = order.start();
  const second = order.start();
  assert.equal(order.isLatest(first), false);
  assert.equal(order.isLatest(second), true);
});
