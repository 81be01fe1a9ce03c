// In the `user` mode a session shares the node's /tmp, /var/tmp, /dev/shm, /run/lock and System V IPC: what it leaves there
// would outlast it (in memory, where /dev/shm is) and be readable by the next session of its uid. The sandbox
// removes it when the uid is given back, and again when a uid is taken (session-user-files.ts).
import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { runToEnd, scenarioStart, startTestSandbox } from "./sandbox-test-kit.js";

const skip = process.getuid?.() !== 0 ? "the user mode needs root" : !findSetpriv() && "the user mode needs setpriv";

/** The ids of the System V shared memory segments on the node. */
function sharedMemoryIds(): number[] {
  return readFileSync("/proc/sysvipc/shm", "utf8")
    .split("\n")
    .slice(1)
    .filter((line) => line.trim() !== "")
    .map((line) => Number(line.trim().split(/\s+/)[1]));
}

void it("removes what a user-mode session left in the node's shared places once it ended", { skip }, async () => {
  const t = await startTestSandbox({ isolation: "user" });
  try {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "litter" }));
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.COMPLETED, exited.errorMessage);
    const left = JSON.parse(exited.result?.text ?? "{}") as { files: string[]; uid: number; shm: number };
    assert.ok(left.uid >= 200000, `a session uid: ${left.uid}`);
    // Given back as the session ends, around its exited message.
    for (let waited = 0; left.files.some((file) => existsSync(file)) && waited < 5000; waited += 50)
      await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(
      left.files.filter((file) => existsSync(file)),
      [],
    );
    assert.ok(!sharedMemoryIds().includes(left.shm), `System V segment ${left.shm} is gone`);
  } finally {
    await t.close();
  }
});

void it("removes a tree a user-mode session nested past PATH_MAX in the shared places", { skip }, async () => {
  const t = await startTestSandbox({ isolation: "user" });
  try {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "litter-deep" }));
    const exited = stream.exited();
    assert.equal(exited.status, SessionStatus.COMPLETED, exited.errorMessage);
    const { tops } = JSON.parse(exited.result?.text ?? "{}") as { tops: string[] };
    assert.equal(tops.length, 2);
    for (let waited = 0; tops.some((top) => existsSync(top)) && waited < 5000; waited += 50)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const left = tops.filter((top) => existsSync(top));
    // Removed by root whatever the outcome, so a failing run leaves nothing on the node.
    for (const top of left) rmSync(top, { recursive: true, force: true });
    assert.deepEqual(left, []);
  } finally {
    await t.close();
  }
});
