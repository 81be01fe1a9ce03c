// The times `oz0 usage --since/--until` takes (cli/usage-format.ts parseWhen):
// how long ago, a date, or a date and time with its zone; nothing that would
// silently mean another window.
import assert from "node:assert/strict";
import { test } from "node:test";
import { parseWhen, usageWindow } from "../src/cli/usage-window.js";

const now = new Date("2026-12-05T10:00:00.000Z");
const iso = (text: string): string | undefined => parseWhen(text, now)?.toISOString();

void test("how long ago, counted back from the window's end", () => {
  assert.equal(iso("24h"), "2026-12-04T10:00:00.000Z");
  assert.equal(iso("7d"), "2026-11-28T10:00:00.000Z");
  assert.equal(iso("1h30m"), "2026-12-05T08:30:00.000Z");
  assert.equal(iso("0h"), now.toISOString());
  assert.equal(iso("99999999999d"), undefined, "further back than a date holds");
});

void test("a date is midnight UTC; a time needs its zone", () => {
  assert.equal(iso("2026-12-01"), "2026-12-01T00:00:00.000Z");
  assert.equal(iso("2026-12-01T08:00Z"), "2026-12-01T08:00:00.000Z");
  assert.equal(iso("2026-12-01T08:00:30.5+01:00"), "2026-12-01T07:00:30.500Z");
  assert.equal(iso("2024-02-29"), "2024-02-29T00:00:00.000Z", "a leap day that exists");
  for (const refused of [
    "2026-12-01T08:00", // no zone: the local one would decide
    "2026-02-30",
    "2026-02-29",
    "2026-04-31",
    "2026-13-01",
    "2026-12-01T25:00Z",
    "2026-12-01T08:61Z",
    "yesterday",
    "1.5h",
    "1w",
    "",
  ])
    assert.equal(iso(refused), undefined, refused);
});

void test("the window: the day before --until by default, --since from now, never empty or backwards", () => {
  const window = (options: { since?: string; until?: string }) => {
    const { since, until } = usageWindow({ ...options, now });
    return [since.toISOString(), until.toISOString()];
  };
  assert.deepEqual(window({}), ["2026-12-04T10:00:00.000Z", now.toISOString()]);
  assert.deepEqual(window({ until: "2026-12-01" }), ["2026-11-30T00:00:00.000Z", "2026-12-01T00:00:00.000Z"]);
  assert.deepEqual(window({ since: "7d", until: "1d" }), ["2026-11-28T10:00:00.000Z", "2026-12-04T10:00:00.000Z"]);
  assert.throws(() => window({ since: "0h" }), /is empty: give a --since before --until/);
  assert.throws(() => window({ since: "1h", until: "2h" }), /--since \(.*\) must come before --until/);
  assert.throws(() => window({ until: "tomorrow" }), /--until tomorrow: give how long ago/);
});
