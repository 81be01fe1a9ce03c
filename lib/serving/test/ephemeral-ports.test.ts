// The ports a stack's services take when any free one will do: below the kernel's ephemeral range, where no
// process binding port 0 can be handed one while its service is down (dev-ports.test.ts checks a real stack's).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ephemeralRangeStart, portBelowEphemeralRange } from "../src/ephemeral-ports.js";

void test("a service's port lies between 10000 and the ephemeral range's start, or from 1024 where that is short", () => {
  assert.equal(portBelowEphemeralRange({ rangeStart: 32_768, random: () => 0 }), 10_000);
  assert.equal(portBelowEphemeralRange({ rangeStart: 32_768, random: () => 0.999_999 }), 32_767);
  assert.equal(portBelowEphemeralRange({ rangeStart: 20_000, random: () => 0.5 }), 15_000);
  assert.equal(portBelowEphemeralRange({ rangeStart: 10_500, random: () => 0 }), 1_024);
  assert.equal(portBelowEphemeralRange({ rangeStart: 10_500, random: () => 0.999_999 }), 10_499);
  // A range that starts below 2024 leaves the choice to the kernel.
  assert.equal(portBelowEphemeralRange({ rangeStart: 1_500, random: () => 0.5 }), 0);
});

void test("the ephemeral range's start is read from the kernel's setting, 32768 when it cannot be", () => {
  assert.equal(
    ephemeralRangeStart(() => "40000\t60999\n"),
    40_000,
  );
  assert.equal(
    ephemeralRangeStart(() => "garbage"),
    32_768,
  );
  assert.equal(
    ephemeralRangeStart(() => {
      throw new Error("ENOENT");
    }),
    32_768,
  );
});
