// A session whose processes take more memory than a session may (OZ0_SESSION_MAX_MEMORY_BYTES) is stopped, whatever
// process of it took it, and the others run on (session-memory-guard.ts).
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { processMemory } from "../src/session-memory-guard.js";
import { isText, runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

const MIB = 1024 * 1024;

// The user mode needs root; elsewhere the sessions run as the sandbox's user in both others.
const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

for (const isolation of MODES)
  // Bounded: without the guard the hog takes its 512 MiB and waits for ever.
  void it(`stops the session over its memory (${isolation}), and the others run on`, { timeout: 60_000 }, async () => {
    const t = await startTestSandbox({ isolation, maxSessionMemoryBytes: 192 * MIB, memoryCheckMs: 50 });
    try {
      const idle = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
      await idle.waitFor(isText("ready"), "the idle session ready");
      const hog = await runToEnd(t.client, scenarioStart({ mode: "hog", mib: 512 }));
      const exited = hog.exited();
      assert.equal(exited.status, SessionStatus.FAILED);
      assert.equal(exited.errorCode, "memory_limit", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^the session took \d+\.\d MiB of memory \(its processes\), above a session's limit of 192\.0 MiB \(OZ0_SESSION_MAX_MEMORY_BYTES\); the session was stopped$/,
      );
      // The idle session took far less: it still runs, and ends as asked.
      idle.send({ message: { case: "cancel", value: {} } });
      await idle.finished;
      assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
    } finally {
      await t.close();
    }
  });

// In the user mode a session shares the node's /dev/shm, a tmpfs: a file written there is memory no process is
// charged for, and counts with its processes.
void it(
  "counts a user-mode session's files in the node's tmpfs",
  // Bounded: without the count the file takes its 512 MiB and the session waits for ever.
  { skip: process.getuid?.() !== 0 && "the user mode needs root", timeout: 60_000 },
  async () => {
    const t = await startTestSandbox({ isolation: "user", maxSessionMemoryBytes: 192 * MIB, memoryCheckMs: 50 });
    try {
      const hog = await runToEnd(t.client, scenarioStart({ mode: "hog", mib: 512, into: "shm" }));
      const exited = hog.exited();
      assert.equal(exited.errorCode, "memory_limit", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^the session took \d+\.\d MiB of memory \(its processes, and its files in the node's [^:]*\/dev\/shm[^:]*: \d+\.\d MiB\), above a session's limit of 192\.0 MiB/,
      );
    } finally {
      await t.close();
    }
  },
);

// A memfd is memory no process is charged for unless mapped: written through its descriptor, or mapped a page of and
// its descriptor closed (seen through /proc/<pid>/map_files, which the kernel opens to a root sandbox only), it
// counts whole with the session's processes. In the user mode, System V shared memory its uid made and detached
// from counts too (under bubblewrap a session's segments are its IPC namespace's, which the seccomp filter keeps
// small: isolation.test.ts).
const ROOT = process.getuid?.() === 0;
for (const [isolation, into, mib] of [
  ...MODES.map((mode) => [mode, "memfd", 512] as const),
  ...(ROOT
    ? ([
        ["bwrap", "memfd-mapped", 512],
        ["user", "sysv", 224],
      ] as const)
    : []),
])
  // Bounded: without the count the memory is taken and the session waits for ever.
  void it(
    `counts the ${into} memory a session holds outside its processes (${isolation})`,
    { timeout: 60_000 },
    async () => {
      const t = await startTestSandbox({ isolation, maxSessionMemoryBytes: 192 * MIB, memoryCheckMs: 50 });
      try {
        const hog = await runToEnd(t.client, scenarioStart({ mode: "hog", mib, into }));
        const exited = hog.exited();
        assert.equal(exited.errorCode, "memory_limit", exited.errorMessage);
        assert.match(
          exited.errorMessage,
          into === "sysv"
            ? // The segment it has attached at that moment may count as a file of memory it holds.
              /^the session took \d+\.\d MiB of memory \(its processes, .*and System V shared memory segments it detached from: \d+\.\d MiB\), above a session's limit of 192\.0 MiB/
            : /^the session took \d+\.\d MiB of memory \(its processes, and 1 file of memory with no name they hold \(memfd, deleted tmpfs files\): \d+\.\d MiB\), above a session's limit of 192\.0 MiB/,
        );
      } finally {
        await t.close();
      }
    },
  );

// Four processes sharing 128 MiB (a fork's pages are its parent's until written) hold 512 MiB resident between them,
// 128 MiB in fact: the guard reads the proportional figure before it stops a session. The same with a memfd they all
// map and hold, or with a file in the node's /dev/shm (the user mode: Python's multiprocessing.shared_memory makes
// one): what they map of a file of memory the session holds counts once, as the file.
for (const [what, into, isolation] of [
  ["memory processes share", undefined, "bwrap"],
  ["a file of memory the session's processes hold and map", "memfd-shared", "bwrap"],
  ...(process.getuid?.() === 0
    ? ([["a file in the node's /dev/shm the session's processes map", "shm-shared", "user"]] as const)
    : []),
] as const)
  void it(`counts ${what} once, and lets a session that shares within its limit run`, async () => {
    const t = await startTestSandbox({ isolation, maxSessionMemoryBytes: 192 * MIB, memoryCheckMs: 50 });
    try {
      const sharer = new SessionStream(t.client, {
        message: { case: "start", value: scenarioStart({ mode: "hog", mib: 128, forks: 3, into }) },
      });
      await sharer.waitFor(isText("hogging"), "the sharer took its memory");
      // Shared by its forks at once; thirty checks meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 1500));
      sharer.send({ message: { case: "cancel", value: {} } });
      await sharer.finished;
      assert.equal(sharer.exited().status, SessionStatus.CANCELLED, sharer.exited().errorMessage);
    } finally {
      await t.close();
    }
  });

// In processes of their own: this one's garbage collector would move its figure between two readings.
void it("reads what a process takes: the anonymous memory it wrote, resident and proportional", async () => {
  const python = (mib: number): ChildProcess =>
    spawn("python3", [
      "-c",
      `b = bytearray(${mib} << 20)\nb[::4096] = b"\\x01" * len(range(0, ${mib} << 20, 4096))\nprint("ready", flush=True)\nimport time; time.sleep(60)`,
    ]);
  const [idle, hog] = [python(0), python(64)];
  try {
    for (const child of [idle, hog])
      await new Promise((resolve, reject) => {
        child.stdout!.once("data", resolve);
        child.once("exit", (code) => reject(new Error(`python exited ${code}`)));
      });
    for (const how of ["resident", "proportional"] as const) {
      const taken = processMemory(`/proc/${hog.pid!}`, how) - processMemory(`/proc/${idle.pid!}`, how);
      assert.ok(taken >= 60 * MIB && taken < 80 * MIB, `${how}: ${taken} bytes more than an idle python`);
    }
    assert.equal(processMemory(`/proc/${2 ** 22 + 1}`, "resident"), 0, "a process that does not exist takes nothing");
  } finally {
    idle.kill("SIGKILL");
    hog.kill("SIGKILL");
  }
});
