// Under bubblewrap run by an unprivileged sandbox (as the Kubernetes manifests run it), every session's user namespace
// is the sandbox user's, and the kernel charges what a namespace's processes hold of a per-user count (inotify
// instances and watches, fanotify groups and marks) to that user too: without a share of its own, one session took the
// node's 128 inotify instances of that user, and no other session could watch a file (session-namespace-limits.ts).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { gatedOnNamespaceLimits, sessionShares } from "../src/session-namespace-limits.js";
import {
  runToEnd,
  scenarioStart,
  SessionStream,
  startUnprivilegedSandbox,
  unprivilegedSandboxSkip,
} from "./sandbox-test-kit.js";

void describe(
  "a bubblewrap session's share of its user's inotify and fanotify counts",
  { skip: unprivilegedSandboxSkip() },
  () => {
    let sandbox: Awaited<ReturnType<typeof startUnprivilegedSandbox>>;
    let shares: Record<string, number>;
    before(async () => {
      sandbox = await startUnprivilegedSandbox({ OZ0_ISOLATION: "bwrap", OZ0_MAX_SESSIONS: "4" });
      const startup = sandbox.lines
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .find((line) => line.isolation === "bwrap");
      shares = startup?.sessionNamespaceShares as Record<string, number>;
      assert.equal(typeof shares, "object", `the start-up line names the shares: ${JSON.stringify(startup)}`);
    });
    after(() => sandbox.close());

    // Bounded: without the shares the next session gets none, and says so.
    void it("leaves other sessions inotify instances when one takes all it can", { timeout: 60_000 }, async () => {
      const hoarder = new SessionStream(sandbox.client, {
        message: { case: "start", value: scenarioStart({ mode: "inotify", count: 100_000 }) },
      });
      await hoarder.waitFor(
        (m) => m.message.case === "event" && m.message.value.event.case === "text",
        "the hoarder's count",
      );
      // Its share, of the node's 128 by default: fewer than half of them.
      assert.deepEqual(hoarder.texts(), [`inotify ${shares.max_inotify_instances}: Too many open files`]);
      const next = await runToEnd(sandbox.client, scenarioStart({ mode: "inotify", count: 1, hold: false }));
      assert.deepEqual(next.texts(), ["inotify 1"]);
      assert.equal(next.exited().status, SessionStatus.COMPLETED, next.exited().errorMessage);
      hoarder.send({ message: { case: "cancel", value: {} } });
      await hoarder.finished;
    });

    void it("writes every share in the session's namespace, which the session cannot raise", async () => {
      const files = Object.keys(shares).map((name) => `/proc/sys/user/${name}`);
      const probe = await runToEnd(sandbox.client, scenarioStart({ mode: "probe", read: files, write: files }));
      const { reads, writes } = JSON.parse(probe.texts()[0]!) as {
        reads: Record<string, string>;
        writes: Record<string, string>;
      };
      for (const [name, share] of Object.entries(shares)) {
        assert.equal(reads[`/proc/sys/user/${name}`], `${share}\n`, name);
        assert.notEqual(writes[`/proc/sys/user/${name}`], "ok", `the session wrote ${name}`);
      }
    });
  },
);

// The floor (16 instances) times the prod overlay's OZ0_MAX_SESSIONS (16) is twice the default node limit (128):
// eight sessions taking their share took every instance of the user, and the ninth got none, with no word at start.
void it("names the counts whose floor lets the sessions together take the node's whole limit, and what to raise it to", () => {
  const node = new Map([
    ["max_inotify_instances", 128],
    ["max_inotify_watches", 1_048_576],
  ]);
  const crowded = sessionShares(node, 16);
  assert.deepEqual(crowded.shares, [
    ["max_inotify_instances", 16],
    ["max_inotify_watches", 32_768],
  ]);
  assert.deepEqual(crowded.overcommitted, [
    { sysctl: "fs.inotify.max_user_instances", node: 128, share: 16, needed: 512 },
  ]);
  // Four sessions of 16 are half of 128: nothing to raise.
  assert.deepEqual(sessionShares(node, 4).overcommitted, []);
});

// The wait runs before the shares hold: a `cat` on the session's PATH (a folder there that sessions may write, which
// an operator's OZ0_SESSION_PATH may name) would run first, as the session, unbounded.
void it("waits with the system's commands, not the session PATH's, and runs the session's command with its PATH", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-gate-path-"));
  try {
    const current = readFileSync("/proc/sys/user/max_inotify_instances", "utf8").trim();
    const marker = path.join(dir, "planted-cat-ran");
    writeFileSync(path.join(dir, "cat"), `#!/bin/sh\ntouch ${marker}\necho ${current}\n`, { mode: 0o755 });
    writeFileSync(path.join(dir, "session-command"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
    const [file, ...args] = gatedOnNamespaceLimits(
      { perlPath: "/usr/bin/perl", setns: 0, shares: [["max_inotify_instances", Number(current)]] },
      ["session-command"],
    );
    const run = spawnSync(file!, args, { env: { PATH: `${dir}:/usr/bin:/bin` }, encoding: "utf8", timeout: 30_000 });
    assert.equal(run.stdout, "ran\n", run.stderr);
    assert.equal(existsSync(marker), false, "the PATH's cat ran in the wait");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
