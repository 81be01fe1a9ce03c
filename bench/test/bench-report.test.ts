// The statistics every bench prints its p50, p99 and round medians with.
import assert from "node:assert/strict";
import { test } from "node:test";
import { median, percentile } from "../bench-report.js";

const oneToHundred = Array.from({ length: 100 }, (_, i) => i + 1);

void test("percentile is by nearest rank: the smallest value with at least that share of the values at or below it", () => {
  assert.equal(percentile(oneToHundred, 0.5), 50);
  assert.equal(percentile(oneToHundred, 0.99), 99);
  assert.equal(percentile(oneToHundred, 1), 100);
  assert.equal(percentile(oneToHundred, 0), 1);
  // With few values, p99 is the largest: never a value past the end.
  assert.equal(percentile([3, 7, 9], 0.99), 9);
  assert.equal(percentile(new Float64Array([0.5, 1.5]), 0.5), 0.5);
  assert.ok(Number.isNaN(percentile([], 0.5)), "no values have no percentile");
});

void test("the median of an even count averages the middle two, and the values need not be sorted", () => {
  assert.equal(median([4, 1, 3, 2]), 2.5);
  assert.equal(median([9, 1, 5]), 5);
});
