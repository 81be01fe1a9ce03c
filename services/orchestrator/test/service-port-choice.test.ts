// The ports `oz0 dev` gives its services at their first start: below the kernel's ephemeral range, where no process
// binding port 0 can be handed one while its service is down (dev-supervision.test.ts checks a real stack's).
import assert from "node:assert/strict";
import { test } from "node:test";
import { ephemeralRangeStart, portBelowEphemeralRange, portTaken } from "../src/dev/service-port-choice.js";

void test("a service's first port lies between 10000 and the ephemeral range's start", () => {
  assert.equal(portBelowEphemeralRange({ rangeStart: 32_768, random: () => 0 }), 10_000);
  assert.equal(portBelowEphemeralRange({ rangeStart: 32_768, random: () => 0.999_999 }), 32_767);
  assert.equal(portBelowEphemeralRange({ rangeStart: 20_000, random: () => 0.5 }), 15_000);
  // A range that starts too low leaves the choice to the kernel.
  assert.equal(portBelowEphemeralRange({ rangeStart: 10_500, random: () => 0.5 }), 0);
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

void test("a start refused for a taken port is told apart from other failures", () => {
  assert.equal(portTaken(new Error("listen EADDRINUSE: address already in use 127.0.0.1:7700")), true);
  assert.equal(portTaken(new Error("the events service exited with code 1")), false);
});
