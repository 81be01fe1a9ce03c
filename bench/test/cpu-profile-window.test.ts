// The window the control-plane-cost bench cuts each service's profile to.
import assert from "node:assert/strict";
import { test } from "node:test";
import { cpuProfileWindow } from "../cpu-profile-window.js";

const profile = {
  nodes: [{ id: 1 }],
  startTime: 1_000,
  endTime: 4_000,
  // Sample timestamps: 1000, 1100, 1300, 1600, 2000, 2500, 3100, 3800.
  samples: [1, 2, 3, 4, 5, 6, 7, 8],
  timeDeltas: [0, 100, 200, 300, 400, 500, 600, 700],
};

void test("only the samples inside the window stay, each at the time it was taken", () => {
  const cut = cpuProfileWindow(profile, { fromUs: 1_200, toUs: 2_500 });
  assert.deepEqual(cut.samples, [3, 4, 5]);
  // The first delta counts from the new start: timestamps 1300, 1600, 2000 again.
  assert.deepEqual(cut.timeDeltas, [100, 300, 400]);
  assert.equal(cut.startTime, 1_200);
  assert.equal(cut.endTime, 2_500);
  assert.deepEqual(cut.nodes, profile.nodes);
});

void test("a window that misses every sample leaves an empty profile, not an error", () => {
  const cut = cpuProfileWindow(profile, { fromUs: 5_000, toUs: 6_000 });
  assert.deepEqual(cut.samples, []);
  assert.deepEqual(cut.timeDeltas, []);
});
