// A `user`-mode session shares the node's /dev/shm, a tmpfs with a fixed number of inodes: one making empty files
// there without end would leave every user of the node unable to make one (shm_open, sem_open), while no byte of
// memory or disk it is charged for grows. Below the floor of free files, the session whose uid owns the most there is
// stopped (shared-tmpfs-guard.ts). The floor is set just below /dev/shm's free inodes at the start, so what the
// filling session makes crosses it, whatever else the machine makes meanwhile.
import assert from "node:assert/strict";
import { statfsSync } from "node:fs";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  isText,
  recordingLogger,
  runToEnd,
  scenarioStart,
  SessionStream,
  startTestSandbox,
} from "./sandbox-test-kit.js";

const ROOT = process.getuid?.() === 0;

void it(
  "stops the user-mode session making files without end in the node's /dev/shm, and the others run on",
  // Bounded: without the guard the filling session makes its files and waits for ever.
  { skip: !ROOT && "the user mode needs root", timeout: 120_000 },
  async () => {
    const shm = statfsSync("/dev/shm");
    assert.ok(shm.files > 0 && shm.ffree > 100_000, "the test needs a /dev/shm with 100,000 free inodes");
    const t = await startTestSandbox({ isolation: "user", minFreeSharedFiles: shm.ffree - 5000, diskCheckMs: 50 });
    try {
      const idle = new SessionStream(t.client, { message: { case: "start", value: scenarioStart({ mode: "wait" }) } });
      await idle.waitFor(isText("ready"), "the idle session started");
      const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", files: 50_000, into: "shm" }));
      const exited = filler.exited();
      assert.equal(exited.errorCode, "disk_full", exited.errorMessage);
      assert.match(
        exited.errorMessage,
        /^\/dev\/shm has room for \d+ more files, below its floor of \d+ \(OZ0_SANDBOX_MIN_FREE_SHARED_FILES\) while this session's uid owns \d+ entries there: it is a tmpfs every user of the node shares .*Keep temporary files in \$TMPDIR/,
      );
      assert.ok(!filler.texts().includes("filled"), "stopped before it made all it meant to");
      // Its files went with its uid, and with them the shortfall: the idle session was never stopped.
      assert.ok(statfsSync("/dev/shm").ffree > shm.ffree - 5000, "the filler's files were removed when it ended");
      idle.send({ message: { case: "cancel", value: {} } });
      await idle.finished;
      assert.equal(idle.exited().status, SessionStatus.CANCELLED, idle.exited().errorMessage);
    } finally {
      await t.close();
    }
  },
);

void it(
  "below the floor, stops no session whose uid made next to nothing there, says so once, and stops one that fills it later",
  { skip: !ROOT && "the user mode needs root", timeout: 60_000 },
  async () => {
    const shm = statfsSync("/dev/shm");
    const { logger, lines } = recordingLogger();
    // A floor above all /dev/shm has free: as a node whose /dev/shm something other than a session filled.
    const t = await startTestSandbox({
      isolation: "user",
      minFreeSharedFiles: shm.files,
      diskCheckMs: 50,
      logger,
    });
    try {
      const few = new SessionStream(t.client, {
        message: { case: "start", value: scenarioStart({ mode: "fill", files: 10, into: "shm" }) },
      });
      await few.waitFor(isText("filled"), "the session made its ten files");
      // Twenty checks meanwhile.
      await new Promise((resolve) => setTimeout(resolve, 1000));
      few.send({ message: { case: "cancel", value: {} } });
      await few.finished;
      assert.equal(few.exited().status, SessionStatus.CANCELLED, few.exited().errorMessage);
      const warnings = lines.filter((line) =>
        /^\/dev\/shm has room for .*, and no running session made it so$/.test(line.msg),
      );
      assert.equal(warnings.length, 1, JSON.stringify(lines.map((line) => line.msg)));
      // Not counted again while the place's free files hold (a count walks every entry), but one falling is: a
      // session that starts filling it later is stopped all the same.
      const filler = await runToEnd(t.client, scenarioStart({ mode: "fill", files: 50_000, into: "shm" }));
      assert.equal(filler.exited().errorCode, "disk_full", filler.exited().errorMessage);
    } finally {
      await t.close();
    }
  },
);
