// What a session may write under bubblewrap: its own directories, and /tmp and /dev/shm, which are its TMPDIR on
// disk (counted by the disk guard, removed at its end); nothing else, and nothing in memory. Every tmpfs bwrap
// makes (its root, /dev, the covers over hidden paths, a private /tmp) is RAM charged to no process, and where the
// sandbox is unprivileged, as the Kubernetes manifests run it, the session owns them: filling one brought the node,
// or the sandbox's pod, to the OOM killer, which ends other sessions' processes first (bubblewrap-mounts.ts).
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Client } from "@connectrpc/connect";
import { type SandboxService, SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import {
  runToEnd,
  scenarioStart,
  startTestSandbox,
  startUnprivilegedSandbox,
  unprivilegedSandboxSkip,
} from "./sandbox-test-kit.js";

/** A folder the sessions may read, with one inside it they may not see (covered by a tmpfs): as a deployment's. */
function readableWithHidden(): { outer: string; hidden: string } {
  const outer = mkdtempSync(path.join(os.tmpdir(), "oz0-writable-paths-"));
  chmodSync(outer, 0o755);
  const hidden = path.join(outer, "hidden");
  mkdirSync(hidden);
  return { outer, hidden };
}

async function assertWritesOnlyToDisk(client: Client<typeof SandboxService>, hidden: string): Promise<void> {
  const refused = ["/probe-root", "/dev/probe-dev", path.join(hidden, "probe-hidden")];
  const allowed = ["/tmp/probe-tmp", "/dev/shm/probe-shm"];
  const stream = await runToEnd(
    client,
    scenarioStart({
      mode: "probe",
      write: [...refused, ...allowed],
      readAfterWrites: ["$TMPDIR/probe-tmp", "$TMPDIR/probe-shm"],
    }),
  );
  assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
  const report = JSON.parse(stream.texts()[0] ?? "{}") as {
    writes: Record<string, string>;
    readsAfterWrites: Record<string, string>;
  };
  assert.deepEqual(
    report.writes,
    Object.fromEntries([...refused.map((file) => [file, "ERROR EROFS"]), ...allowed.map((file) => [file, "ok"])]),
  );
  // Both are its TMPDIR, in its state directory on the disk.
  assert.deepEqual(report.readsAfterWrites, { "$TMPDIR/probe-tmp": "x", "$TMPDIR/probe-shm": "x" });
}

void describe("what a session may write under bubblewrap", () => {
  void it(`as this sandbox runs (${process.getuid?.() === 0 ? "root: uids of their own" : "unprivileged"})`, async () => {
    const { outer, hidden } = readableWithHidden();
    const t = await startTestSandbox({ isolation: "bwrap", readOnlyPaths: [outer], hiddenPaths: [hidden] });
    try {
      await assertWritesOnlyToDisk(t.client, hidden);
    } finally {
      await t.close();
      rmSync(outer, { recursive: true, force: true });
    }
  });

  // As the Kubernetes manifests run it: there every tmpfs bwrap makes is the session's own.
  void describe("with the sandbox running as an unprivileged user", { skip: unprivilegedSandboxSkip() }, () => {
    let outer: string;
    let hidden: string;
    let sandbox: Awaited<ReturnType<typeof startUnprivilegedSandbox>>;
    before(async () => {
      ({ outer, hidden } = readableWithHidden());
      sandbox = await startUnprivilegedSandbox({
        OZ0_ISOLATION: "bwrap",
        OZ0_SANDBOX_READ_ONLY_PATHS: outer,
        OZ0_SANDBOX_HIDDEN_PATHS: hidden,
      });
    });
    after(async () => {
      await sandbox.close();
      rmSync(outer, { recursive: true, force: true });
    });

    void it("writes to its directories and its TMPDIR alone, never to a tmpfs", async () => {
      await assertWritesOnlyToDisk(sandbox.client, hidden);
    });
  });
});
