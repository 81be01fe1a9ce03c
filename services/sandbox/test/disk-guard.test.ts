// A session filling the node's disk is stopped and the others run on; no session starts while the disk is below
// its floor (session-disk-guard.ts). The floor is set just below the disk's free space at the start, so what the
// filling session writes crosses it, whatever else the machine writes meanwhile: the guard stops the session that
// holds the most, and the idle one holds next to nothing.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { statfsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { Code, ConnectError } from "@connectrpc/connect";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { directoryUsage } from "../src/session-disk-guard.js";
import {
  isText,
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
} from "./sandbox-test-kit.js";

const MIB = 1024 * 1024;

// The user mode needs root; elsewhere the sessions run as the sandbox's user in both others.
const MODES = process.getuid?.() === 0 ? (["bwrap", "user", "none"] as const) : (["bwrap", "none"] as const);

for (const isolation of MODES)
  // Bounded: without the guard the filling session writes its 512 MiB and waits for ever.
  void it(`stops the session filling the disk (${isolation}), and the others run on`, { timeout: 60_000 }, async () => {
    const disk = statfsSync(os.tmpdir());
    const free = disk.bavail * disk.bsize;
    assert.ok(free > 2048 * MIB, "the test needs 2 GiB free");
    const t = await startTestSandbox({ isolation, minFreeDiskBytes: free - 96 * MIB, diskCheckMs: 50 });
    try {
      const idle = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
      await idle.waitFor(isText("ready"), "the idle session ready");
      const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", mib: 512 }));
      const exited = filler.exited();
      assert.equal(exited.status, SessionStatus.FAILED);
      assert.equal(exited.errorCode, "disk_full", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^this node's disk has .* MiB free, below its floor of .* MiB \(OZ0_SANDBOX_MIN_FREE_BYTES\) while this session was writing to it/,
      );
      assert.ok(!filler.texts().includes("filled"), "stopped before it wrote all it meant to");
      // Collecting would copy the working directory into a git repository, onto the full disk.
      const artifacts = filler.received.find((m) => m.message.case === "artifacts")?.message;
      assert.equal(artifacts?.case, "artifacts");
      assert.match(artifacts.value.error, /^artifacts were not collected: the node's disk is below its floor/);
      // The idle session was not the cause: it still runs, and ends as asked.
      idle.send({ message: { case: "cancel", value: {} } });
      await idle.finished;
      assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
    } finally {
      await t.close();
    }
  });

// Root alone may read another process's mappings' files (/proc/<pid>/map_files).
const HOLDS = process.getuid?.() === 0 ? (["open", "mapped"] as const) : (["open"] as const);
for (const isolation of MODES)
  for (const held of HOLDS)
    // Bounded: without the count of deleted files the writer fills 512 MiB out of du's sight and waits for ever.
    void it(
      `stops a session writing into a file it deleted while ${held} (${isolation})`,
      { timeout: 60_000 },
      async () => {
        const disk = statfsSync(os.tmpdir());
        const free = disk.bavail * disk.bsize;
        assert.ok(free > 2048 * MIB, "the test needs 2 GiB free");
        const t = await startTestSandbox({ isolation, minFreeDiskBytes: free - 96 * MIB, diskCheckMs: 50 });
        try {
          const idle = new SessionStream(t.client, {
            message: { case: "start", value: scenarioStart({ mode: "wait" }) },
          });
          await idle.waitFor(isText("ready"), "the idle session ready");
          const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", mib: 512, deleted: held }));
          const exited = filler.exited();
          assert.equal(exited.errorCode, "disk_full", exited.errorMessage);
          assert.match(
            exited.errorMessage,
            /while this session was writing to it \(its directories hold .* MiB in \d+ files, and files it deleted but still holds (\d+\.\d) MiB in 1\); the session was stopped$/,
          );
          const heldMib = Number(/still holds (\d+\.\d) MiB/.exec(exited.errorMessage)?.[1]);
          // More than the guard's slack of 1 MiB; how much more depends on what else writes to the disk meanwhile
          // (the floor lies 96 MiB below the free space at the start: 62 MiB once, with a CI run beside it).
          assert.ok(heldMib > 1, `the deleted file counted: ${heldMib} MiB`);
          idle.send({ message: { case: "cancel", value: {} } });
          await idle.finished;
          assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
        } finally {
          await t.close();
        }
      },
    );

// A Kubernetes emptyDir's sizeLimit: past it the kubelet evicts the pod and every session with it, however much the
// node's disk has free. The floor applies to what the limit leaves.
// Bounded: without the limit the filling session writes its 512 MiB and waits for ever.
void it("stops the session filling the sandbox's disk limit, and the others run on", { timeout: 60_000 }, async () => {
  const t = await startTestSandbox({
    isolation: "bwrap",
    diskLimitBytes: 256 * MIB,
    minFreeDiskBytes: 64 * MIB,
    diskCheckMs: 50,
  });
  try {
    const idle = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
    await idle.waitFor(isText("ready"), "the idle session ready");
    const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", mib: 512 }));
    const exited = filler.exited();
    assert.equal(exited.errorCode, "disk_full", exited.errorMessage);
    assert.match(
      exited.errorMessage,
      /^this sandbox's disk limit of 256\.0 MiB \(OZ0_SANDBOX_DISK_LIMIT_BYTES\) leaves .* MiB free, below its floor of 64\.0 MiB \(OZ0_SANDBOX_MIN_FREE_BYTES\) while this session was writing to it/,
    );
    assert.ok(!filler.texts().includes("filled"), "stopped before it wrote all it meant to");
    idle.send({ message: { case: "cancel", value: {} } });
    await idle.finished;
    assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
    // What the filler wrote went with it: room again, under the limit, for the next session.
    const next = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    assert.equal(next.exited().status, SessionStatus.COMPLETED, next.exited().errorMessage);
  } finally {
    await t.close();
  }
});

// Collecting a session's artifacts copies its working directory into a git repository beside it (artifact-collector.ts),
// on the same disk, after its harness ended: a session that stopped writing above the floor doubled what it held as it
// ended, out of the guard's sight, past the floor or a Kubernetes emptyDir's sizeLimit (the kubelet then evicts the pod
// and every session with it; attacker review). Incompressible bytes: git's copy is as large as they are.
void it(
  "stops collecting a session's artifacts once the copy takes the disk below its floor",
  { timeout: 60_000 },
  async () => {
    const t = await startTestSandbox({
      isolation: "bwrap",
      diskLimitBytes: 256 * MIB,
      minFreeDiskBytes: 64 * MIB,
      diskCheckMs: 50,
    });
    try {
      const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", mib: 150, random: true, end: true }));
      const exited = filler.exited();
      assert.equal(exited.status, SessionStatus.COMPLETED, exited.errorMessage);
      assert.ok(filler.texts().includes("filled"), "it wrote all it meant to, above the floor");
      const artifacts = filler.received.find((m) => m.message.case === "artifacts")?.message;
      assert.equal(artifacts?.case, "artifacts");
      assert.match(
        artifacts.value.error,
        /^artifacts were not collected: the node's disk went below its floor \(OZ0_SANDBOX_MIN_FREE_BYTES, _FILES\) while they were, and collecting them copies the working directory$/,
      );
      // The copy went with the session: room again, under the limit, for the next one.
      const next = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
      assert.equal(next.exited().status, SessionStatus.COMPLETED, next.exited().errorMessage);
    } finally {
      await t.close();
    }
  },
);

void it("refuses every session while the root holds more than its limit leaves above the floor", async () => {
  const { mkdtempSync, writeFileSync, rmSync } = await import("node:fs");
  const { SessionDiskGuard } = await import("../src/session-disk-guard.js");
  const { GuardReadings } = await import("../src/guard-readings.js");
  const readings = new GuardReadings();
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-guard-limit-"));
  try {
    writeFileSync(path.join(dir, "left.bin"), randomBytes(64 * MIB));
    const guard = (limitBytes: number) =>
      new SessionDiskGuard({
        root: dir,
        limitBytes,
        minFreeBytes: 32 * MIB,
        minFreeFiles: 1,
        sessions: () => [],
        readings,
        logger: recordingLogger().logger,
      });
    const roomy = guard(128 * MIB);
    const full = guard(80 * MIB);
    try {
      assert.equal(await roomy.refusal(), undefined, "64 MiB left under a limit of 128 MiB");
      assert.match(
        (await full.refusal()) ?? "",
        /^this sandbox's disk limit of 80\.0 MiB \(OZ0_SANDBOX_DISK_LIMIT_BYTES\) leaves (15|16)\.\d MiB free, below its floor of 32\.0 MiB \(OZ0_SANDBOX_MIN_FREE_BYTES\): no session starts until there is room/,
      );
    } finally {
      roomy.close();
      full.close();
    }
  } finally {
    await readings.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

void it("stops a session making files without end (inodes), as one writing bytes", { timeout: 60_000 }, async () => {
  const disk = statfsSync(os.tmpdir());
  assert.ok(
    disk.files > 0 && disk.ffree > 100_000,
    "the test needs a filesystem that counts inodes, 100,000 of them free",
  );
  const t = await startTestSandbox({ isolation: "bwrap", minFreeDiskFiles: disk.ffree - 5000, diskCheckMs: 50 });
  try {
    const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", files: 50_000 }));
    const exited = filler.exited();
    assert.equal(exited.errorCode, "disk_full", exited.errorMessage);
    assert.match(
      exited.errorMessage,
      /^this node's disk has room for \d+ more files, below its floor of \d+ \(OZ0_SANDBOX_MIN_FREE_FILES\) while this session was writing to it \(its directories hold .* in \d+ files\)/,
    );
    assert.ok(!filler.texts().includes("filled"), "stopped before it made all it meant to");
  } finally {
    await t.close();
  }
});

void it("refuses every session while the disk is below its floor, saying why", async () => {
  const disk = statfsSync(os.tmpdir());
  // A floor above all the disk has free: as a node whose disk a session (or anything else) filled.
  const t = await startTestSandbox({ minFreeDiskBytes: disk.bavail * disk.bsize + 1024 * MIB });
  try {
    const refused = await runToEnd(t.client, scenarioStart({ mode: "complete" }));
    const error = ConnectError.from(refused.error);
    assert.equal(error.code, Code.ResourceExhausted, error.message);
    assert.match(
      error.rawMessage,
      /^this node's disk has .* MiB free, below its floor of .* MiB \(OZ0_SANDBOX_MIN_FREE_BYTES\): no session starts until there is room/,
    );
  } finally {
    await t.close();
  }
});

void it("stops the session that grew, not the one that holds the most", async () => {
  const { mkdtempSync, writeFileSync, mkdirSync, rmSync } = await import("node:fs");
  const { SessionDiskGuard } = await import("../src/session-disk-guard.js");
  const { GuardReadings } = await import("../src/guard-readings.js");
  const readings = new GuardReadings();
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-guard-"));
  const stopped: string[] = [];
  const session = (id: string) => {
    mkdirSync(path.join(dir, id));
    return { id, running: true, directories: [path.join(dir, id)], stopForDisk: () => void stopped.push(id) };
  };
  try {
    const holder = session("holder");
    const writer = session("writer");
    // Written before the guard's first measure: its baseline, however large.
    writeFileSync(path.join(dir, "holder", "old.bin"), randomBytes(96 * MIB));
    const disk = statfsSync(dir);
    const guard = new SessionDiskGuard({
      root: dir,
      minFreeBytes: disk.bavail * disk.bsize - 48 * MIB,
      minFreeFiles: 1,
      sessions: () => [holder, writer],
      readings,
      logger: recordingLogger().logger,
    });
    try {
      assert.equal(await guard.refusal(), undefined, "above the floor at first");
      writeFileSync(path.join(dir, "writer", "new.bin"), randomBytes(64 * MIB));
      await guard.check();
      assert.deepEqual(stopped, ["writer"]);
      assert.match((await guard.refusal()) ?? "", /below its floor/);
    } finally {
      guard.close();
    }
  } finally {
    await readings.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

// What the guard counts is given back when a session ends: its directories go, however deep the tree it left.
void it("removes a session's tree deeper than PATH_MAX when it ends", async () => {
  const { existsSync, readdirSync } = await import("node:fs");
  const t = await startTestSandbox({ isolation: "none" });
  try {
    const stream = await runToEnd(t.client, scenarioStart({ mode: "deep" }));
    assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
    const sessions = path.join(t.root, "sessions");
    assert.deepEqual(existsSync(sessions) ? readdirSync(sessions) : [], [], "nothing of the session is left");
  } finally {
    await t.close();
  }
});

void it("starts over a previous run's leftover tree deeper than PATH_MAX, and removes it", async () => {
  const { mkdtempSync, mkdirSync, writeFileSync, readdirSync, rmSync } = await import("node:fs");
  const root = mkdtempSync(path.join(os.tmpdir(), "oz0-sandbox-stale-"));
  try {
    // As a killed run leaves it: a session's folder with what its harness made.
    const deep = path.join(root, "sessions", "stale-session", "work");
    mkdirSync(deep, { recursive: true });
    const start = process.cwd();
    process.chdir(deep);
    try {
      for (let i = 0; i < 300; i++) {
        mkdirSync("a-folder-name-twenty");
        process.chdir("a-folder-name-twenty");
      }
      writeFileSync("bottom.bin", "left behind");
    } finally {
      process.chdir(start);
    }
    const t = await startTestSandbox({ root });
    try {
      assert.deepEqual(readdirSync(path.join(root, "sessions")), []);
    } finally {
      await t.close();
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

void it("counts what a session's directories take on disk, each file once", async () => {
  const { mkdtempSync, writeFileSync, linkSync, mkdirSync, rmSync } = await import("node:fs");
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-du-"));
  try {
    mkdirSync(path.join(dir, "sub"));
    writeFileSync(path.join(dir, "sub", "a.bin"), Buffer.alloc(4 * MIB, 1));
    linkSync(path.join(dir, "sub", "a.bin"), path.join(dir, "b.bin"));
    const usage = await directoryUsage([dir, path.join(dir, "sub"), path.join(dir, "missing")]);
    assert.ok(usage !== undefined, "du gave a total, a missing folder besides");
    assert.ok(usage.bytes >= 4 * MIB && usage.bytes < 5 * MIB, `${usage.bytes} bytes`);
    // The folder, sub, and a.bin under its two names.
    assert.equal(usage.files, 3);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
