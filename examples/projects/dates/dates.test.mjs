import assert from "node:assert/strict";
import { test } from "node:test";
import { addDays, formatDate } from "./dates.mjs";

test("formatDate writes YYYY-MM-DD", () => {
  assert.equal(formatDate(new Date(Date.UTC(2026, 0, 31))), "2026-01-31");
  assert.equal(formatDate(new Date(Date.UTC(2026, 11, 1))), "2026-12-01");
});

test("addDays crosses month ends", () => {
  assert.equal(formatDate(addDays(new Date(Date.UTC(2026, 0, 31)), 1)), "2026-02-01");
});
