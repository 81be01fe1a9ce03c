// In the `user` mode a session shares the node's /tmp, /var/tmp, /dev/shm, /run/lock and System V IPC: what it leaves there
// would outlast it (in memory, where /dev/shm is) and be readable by the next session of its uid. The sandbox
// removes it when the uid is given back, and again when a uid is taken (session-user-files.ts).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { removeUidLeftovers } from "../src/session-user-files.js";
import { setprivUserArgs } from "../src/session-user-launcher.js";
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

/** Uids of this test process's own, apart from the sandboxes' range and session-user-pool.test.ts's. */
const BASE = 3_500_000 + (process.pid % 100_000) * 2;

/**
 * Run as another user (a session running on): folders of its own that every user may write, trap<i>-a and
 * trap<i>-b, and in each pair a folder x it moves to the other side as soon as a process opens it (inotify's
 * IN_OPEN), printing a line for each move.
 */
const MOVER = String.raw`
import ctypes, os, select, struct, sys
place, libc = sys.argv[1], ctypes.CDLL(None, use_errno=True)
fd, side = libc.inotify_init1(0), {}
for t in range(5):
    for s in "ab": os.mkdir(f"{place}/trap{t}-{s}"); os.chmod(f"{place}/trap{t}-{s}", 0o777)
    os.mkdir(f"{place}/trap{t}-a/x"); os.chmod(f"{place}/trap{t}-a/x", 0o777)
    for i in range(2000): open(f"{place}/trap{t}-a/x/{i}", "w").close()
    side[libc.inotify_add_watch(fd, f"{place}/trap{t}-a/x".encode(), 0x20)] = t
print("ready", flush=True)
while True:
    buf, at, hit = os.read(fd, 65536), 0, set()
    while at < len(buf):
        wd, _, _, length = struct.unpack_from("iIII", buf, at); at += 16 + length; hit.add(wd)
    for wd in hit:
        t, now = side[wd], "a" if os.path.isdir(f"{place}/trap{side[wd]}-a/x") else "b"
        os.rename(f"{place}/trap{t}-{now}/x", f"{place}/trap{t}-{'b' if now == 'a' else 'a'}/x")
        print("moved", flush=True)
`;

void it(
  "removes what a uid left in a shared place while another user moves its own folders under the sweep",
  { skip: skip || (!existsSync("/usr/bin/python3") && "needs /usr/bin/python3") },
  async () => {
    // A place as /dev/shm is: root's, 1777 (a tmpfs: the mover's folders are made fast).
    const place = mkdtempSync(path.join(existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir(), "oz0-sweep-moved-"));
    chmodSync(place, 0o1777);
    const victim = { uid: BASE, gid: BASE };
    const other = BASE + 1;
    try {
      // Before the other user's folders and after them: a place lists its entries in the order of their names'
      // hashes, or of their making.
      const leave = (from: number): void => {
        for (let i = from; i < from + 20; i++) {
          const file = path.join(place, `secret-${i}`);
          writeFileSync(file, "a session's secret", { mode: 0o600 });
          chownSync(file, victim.uid, victim.gid);
        }
      };
      leave(0);
      const mover = spawn(
        findSetpriv()!,
        [...setprivUserArgs({ uid: other, gid: other }), "--", "/usr/bin/python3", "-c", MOVER, place],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      let out = "";
      mover.stdout.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
      try {
        for (let waited = 0; !out.includes("ready") && mover.exitCode === null && waited < 20_000; waited += 25)
          await new Promise((resolve) => setTimeout(resolve, 25));
        assert.ok(out.includes("ready"), "the mover is ready");
        leave(20);
        await removeUidLeftovers(victim, [place]);
      } finally {
        mover.kill("SIGKILL");
      }
      const left = readdirSync(place).filter((name) => name.startsWith("secret-"));
      assert.ok(out.includes("moved"), "the other user moved a folder under the sweep");
      assert.deepEqual(left, [], "every file of the uid went, whatever another user moved meanwhile");
    } finally {
      rmSync(place, { recursive: true, force: true });
    }
  },
);
