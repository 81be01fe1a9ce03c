// The /proc/<pid>/stat reader the control-plane-cost bench divides by jobs.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { parseProcStat, readProcessCpu, readProcessWakeups, ticksPerSecond } from "../process-cpu.js";

// A real line's shape: pid, (comm), state, then 49 numbers; utime..cstime are fields 14..17.
const line = (comm: string): string =>
  `4242 (${comm}) S 1 4242 4242 0 -1 4194560 900 0 0 0 731 122 15 4 20 0 11 0 1234 10000 500 ${"0 ".repeat(30)}0\n`;

void test("the CPU fields are counted from the last ')', so a command name with spaces and parentheses does not shift them", () => {
  const expected = { utime: 731, stime: 122, cutime: 15, cstime: 4 };
  assert.deepEqual(parseProcStat(line("node")), expected);
  assert.deepEqual(parseProcStat(line("a) b (c) 9 9")), expected);
});

void test("a line that is not a stat line is refused with what was wrong", () => {
  assert.throws(() => parseProcStat("no parentheses here"), /no command name in parentheses/);
  assert.throws(() => parseProcStat("1 (node) S 1 2"), /field 14 is not a tick count: missing/);
});

void test("this process's reading counts the CPU of a child it waited for", async () => {
  const ticks = ticksPerSecond();
  const before = readProcessCpu(process.pid, ticks);
  // A fixed amount of work, not a time: some tens of milliseconds of CPU on any machine.
  const child = spawn(
    process.execPath,
    ["-e", "let x = 0; for (let i = 0; i < 3e8; i++) x ^= i; if (x === 0.5) console.log(x)"],
    { stdio: "ignore" },
  );
  await new Promise((resolve) => child.on("exit", resolve));
  const after = readProcessCpu(process.pid, ticks);
  assert.ok(
    after.childrenMs > before.childrenMs,
    `children's CPU did not grow: ${before.childrenMs} → ${after.childrenMs} ms`,
  );
  assert.ok(after.ownMs >= before.ownMs);
});

void test("wake-ups: when this process's event loop waits for a timer, its main thread sleeps once more", async () => {
  // A timer already due when the loop comes to wait (the process kept off the CPU that long, on a loaded
  // machine) is run without sleeping: 10 waits of 20 ms each must sleep at least 5 times, not every time.
  const before = readProcessWakeups(process.pid);
  for (let i = 0; i < 10; i++) await sleep(20);
  const after = readProcessWakeups(process.pid);
  assert.ok(after.main - before.main >= 5, `main thread: ${before.main} → ${after.main}`);
  assert.ok(after.all >= after.main, `all threads (${after.all}) include the main thread (${after.main})`);
  assert.ok(after.all - before.all >= after.main - before.main);
});
