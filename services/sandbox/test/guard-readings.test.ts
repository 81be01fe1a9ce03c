// The guards read /proc on a thread of their own (guard-readings.ts): a session decides how much there is to read
// (here a process holding thousands of descriptors), and the sandbox's event loop, which serves every session's
// stream, runs on meanwhile.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { it } from "node:test";
import { GuardReadings } from "../src/guard-readings.js";

// Opens as many descriptors as it may (up to `count`), then a file it deletes and writes 4 MiB into: the last of them.
const HOLDER = String.raw`
import os, resource, sys
count, file = int(sys.argv[1]), sys.argv[2]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
null = os.open("/dev/null", os.O_RDONLY)
opened = 1
while opened < min(count, hard - 16):
    os.dup(null)
    opened += 1
fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o600)
os.unlink(file)
os.write(fd, b"\x07" * (4 << 20))
os.fsync(fd)
print(opened + 1, flush=True)
sys.stdin.read()
`;

void it("reads what a session holds off the event loop, which runs on meanwhile", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-guard-readings-"));
  const holder = spawn("/usr/bin/python3", ["-c", HOLDER, "16000", path.join(dir, "hidden.bin")], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const readings = new GuardReadings();
  try {
    const [line] = (await once(createInterface({ input: holder.stdout! }), "line")) as [string];
    const descriptors = Number(line);
    assert.ok(descriptors > 1000, `the holder opened ${descriptors} descriptors`);
    let turns = 0;
    let reading = true;
    const turn = (): void => {
      turns++;
      if (reading) setImmediate(turn);
    };
    setImmediate(turn);
    const held = await readings.heldDeletedFiles({
      device: statSync(dir).dev,
      sessions: new Map([["holder", { pids: [holder.pid!] }]]),
      budget: descriptors + 100,
    });
    reading = false;
    const found = held.get("holder");
    assert.equal(found?.files, 1, "the deleted file, behind every other descriptor, was found");
    assert.ok(found.bytes >= 4 << 20, `it holds ${found.bytes} bytes`);
    // Looking at every descriptor (a stat apiece) takes tens of milliseconds; the event loop turned meanwhile.
    assert.ok(turns > 1, `the event loop turned ${turns} times while the thread read`);
  } finally {
    holder.kill("SIGKILL");
    await readings.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

void it("answers each reading in turn, and none once closed", async () => {
  const readings = new GuardReadings();
  try {
    const sessions = new Map([["self", { pids: [process.pid] }]]);
    const [first, second] = await Promise.all([
      readings.heldDeletedFiles({ device: 0, sessions, budget: 100 }),
      readings.sessionsOverMemory({ sessions, maxBytes: 1, sharedTmpfs: [] }),
    ]);
    assert.deepEqual(first.get("self"), { bytes: 0, files: 0 }, "nothing this process holds deleted on device 0");
    assert.equal(second.length, 1, "this process takes more than a byte");
    assert.equal(second[0]!.sessionId, "self");
    assert.ok(second[0]!.bytes > 1024 * 1024, `it takes ${second[0]!.bytes} bytes`);
    const over = await readings.sessionsOverMemory({ sessions, maxBytes: Number.MAX_SAFE_INTEGER, sharedTmpfs: [] });
    assert.deepEqual(over, [], "no process takes that much");
    await readings.close();
    // A guard's check still under way when the sandbox stops starts no thread again.
    await assert.rejects(readings.sessionsOverOpenFiles({ sessions, max: 1 }), /the guards' reading thread was closed/);
  } finally {
    await readings.close();
  }
});

void it("fails a reading past its deadline, and those after it, rather than wait on a stuck thread", async () => {
  // A thread takes some milliseconds to start: a 1 ms deadline passes before any first reading is answered.
  const readings = new GuardReadings({ deadlineMs: 1 });
  try {
    const sessions = new Map([["self", { pids: [process.pid] }]]);
    const asked = readings.sessionsOverMemory({ sessions, maxBytes: 1, sharedTmpfs: [] });
    const second = readings.sessionsOverOpenFiles({ sessions, max: 1 });
    await assert.rejects(asked, /^Error: a reading of \/proc took longer than 1 ms; its thread was ended$/);
    await assert.rejects(second, /took longer than 1 ms|its thread was ended|the guards' reading thread exited/);
    // The next reading starts another thread (which, at 1 ms, ends the same way): no reading waits for ever.
    await assert.rejects(
      readings.heldDeletedFiles({ device: 0, sessions, budget: 10 }),
      /^Error: a reading of \/proc took longer than 1 ms; its thread was ended$/,
    );
  } finally {
    await readings.close();
  }
});
