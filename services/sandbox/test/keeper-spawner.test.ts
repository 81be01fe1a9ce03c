// The keeper spawner (src/keeper-spawner.ts) with real processes: a session's
// keeper is one of its spares, not a fork of this process, and behaves as a
// keeper the sandbox started itself (stdin relayed until closed, stdout and
// stderr copied from pipes into its files, which are read with the extra
// stdio entry's, its exit status reported); a keeper outlives the spawner, whose end is then read from the
// exit file; unused spares go with the spawner.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Readable } from "node:stream";
import { after, it } from "node:test";
import { KeeperSpawner } from "../src/keeper-spawner.js";
import { keeperAvailable, keeperSpawn, type KeeperHold, type KeptChild } from "../src/session-keeper.js";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { setprivUserArgs } from "../src/session-user-launcher.js";
import { fileLocked, recordingLogger } from "./sandbox-test-kit.js";

const root = mkdtempSync(path.join(os.tmpdir(), "oz0-keeper-spawner-"));
after(() => rmSync(root, { recursive: true, force: true }));
const skip = keeperAvailable() ? false : "no perl or mkfifo on this machine";

function parentOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
}

function collect(stream: Readable): () => string {
  let text = "";
  stream.setEncoding("utf8");
  stream.on("data", (chunk: string) => (text += chunk));
  return () => text;
}

const exited = (child: KeptChild): Promise<[number | null, NodeJS.Signals | null]> =>
  new Promise((resolve) => child.once("exit", (code, signal) => resolve([code, signal])));

/** Starts `script` under a keeper from one of the spawner's spares, waiting for one to be ready. */
async function fromSpare(spawner: KeeperSpawner, name: string, script: string, hold?: KeeperHold): Promise<KeptChild> {
  const dir = path.join(root, name);
  mkdirSync(dir, { recursive: true });
  for (;;) {
    const kept = spawner.take({
      dir,
      orphanMs: 60_000,
      hold,
      file: "/bin/sh",
      args: ["-c", script],
      spawn: { cwd: root, env: { GREETING: "hello\nworld" }, stdio: ["pipe", "pipe", "pipe", "pipe"] },
    });
    if (kept !== undefined) return kept;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

void it(
  "runs a session's keeper from a spare: stdio through its files, the exit status reported",
  { skip },
  async () => {
    const spawner = new KeeperSpawner({
      dir: path.join(root, "keepers-1"),
      spares: 2,
      logger: recordingLogger().logger,
    });
    try {
      const kept = await fromSpare(
        spawner,
        "session-1",
        'echo "$(pwd) $GREETING"; echo info >&3; cat; echo complaint >&2; exit 3',
      );
      assert.notEqual(parentOf(kept.pid!), process.pid, "the keeper is not this process's fork");
      const out = collect(kept.stdout);
      const err = collect(kept.stderr);
      const info = collect(kept.stdio[3] as Readable);
      const ending = exited(kept);
      kept.stdin.write("from stdin\n");
      kept.stdin.end();
      assert.deepEqual(await ending, [3, null]);
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(out(), `${root} hello\nworld\nfrom stdin\n`);
      assert.equal(err(), "complaint\n");
      assert.equal(info(), "info\n");
      assert.equal(readFileSync(path.join(root, "session-1", "exit"), "utf8"), "3 \n");
    } finally {
      await spawner.close();
    }
    assert.deepEqual(readdirSync(path.join(root, "keepers-1")), [], "unused spares remove their FIFOs");
  },
);

void it(
  "copies the command's output while its stdin waits: a command that writes a MiB to each before it reads a MiB given to it gets it all through",
  { skip, timeout: 60_000 },
  async () => {
    const spawner = new KeeperSpawner({
      dir: path.join(root, "keepers-3"),
      spares: 1,
      logger: recordingLogger().logger,
    });
    try {
      // Pipes hold 64 KiB: a keeper that waited for the command to take its stdin would never read its output, nor it its stdin.
      const kept = await fromSpare(
        spawner,
        "session-5",
        "[ -p /dev/stdout ] && [ -p /dev/stderr ] && echo pipes; head -c 1048576 /dev/zero | tr '\\0' o; head -c 1048576 /dev/zero | tr '\\0' e >&2; wc -c",
      );
      const out = collect(kept.stdout);
      const err = collect(kept.stderr);
      const ending = exited(kept);
      kept.stdin.write(Buffer.alloc(1 << 20, "i"));
      kept.stdin.end();
      assert.deepEqual(await ending, [0, null]);
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(out(), `pipes\n${"o".repeat(1 << 20)}1048576\n`);
      assert.equal(err(), "e".repeat(1 << 20));
    } finally {
      await spawner.close();
    }
  },
);

void it(
  "a keeper in a reused folder takes its FIFO as it is, and nothing the session before it left unread",
  { skip, timeout: 60_000 },
  async () => {
    const spawner = new KeeperSpawner({
      dir: path.join(root, "keepers-4"),
      spares: 1,
      logger: recordingLogger().logger,
    });
    try {
      // More than the pipes between the keeper and the command and the FIFO hold: some of it waits in the FIFO.
      const first = await fromSpare(spawner, "session-6", "sleep 0.3; exit 0");
      const fifo = statSync(path.join(root, "session-6", "stdin")).ino;
      const ending = exited(first);
      first.stdin.write(Buffer.alloc(256 * 1024, "s"));
      assert.deepEqual(await ending, [0, null]);
      assert.equal(first.stdin.destroyed, true, "the sandbox's end of the FIFO is closed with the session");
      // The folder as InternalDirectoryPool.give leaves it for the next session: its FIFO kept, the keeper's files emptied.
      rmSync(path.join(root, "session-6", "exit"));

      const second = await fromSpare(spawner, "session-6", "cat");
      assert.equal(statSync(path.join(root, "session-6", "stdin")).ino, fifo, "the same FIFO");
      const out = collect(second.stdout);
      const end = exited(second);
      second.stdin.end("the second session's\n");
      assert.deepEqual(await end, [0, null]);
      await new Promise((resolve) => setImmediate(resolve));
      assert.equal(out(), "the second session's\n");
    } finally {
      await spawner.close();
    }
  },
);

void it("reports a keeper ended by a signal, and one that outlives the spawner", { skip }, async () => {
  const spawner = new KeeperSpawner({ dir: path.join(root, "keepers-2"), spares: 1, logger: recordingLogger().logger });
  const killed = await fromSpare(spawner, "session-2", "exec sleep 60");
  const ending = exited(killed);
  assert.equal(killed.kill("SIGKILL"), true);
  assert.deepEqual(await ending, [null, "SIGKILL"]);

  const lasting = await fromSpare(spawner, "session-3", "read line; echo got $line");
  const out = collect(lasting.stdout);
  await spawner.close();
  // The spawner is gone; the keeper runs on, and its end is read from its exit file.
  const end = exited(lasting);
  lasting.stdin.write("late\n");
  assert.deepEqual(await end, [0, null]);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out(), "got late\n");
});

void it("starts the keeper itself when no spare is ready", { skip }, async () => {
  const dir = path.join(root, "session-4");
  mkdirSync(dir);
  const noSpare = { take: () => undefined };
  const kept = keeperSpawn({ dir, orphanMs: 60_000, spares: noSpare })("/bin/sh", ["-c", "echo direct; echo fd >&3"], {
    cwd: root,
    env: {},
    stdio: ["pipe", "pipe", "pipe", "pipe"],
  });
  assert.equal(parentOf(kept.pid!), process.pid);
  const out = collect(kept.stdout);
  const info = collect(kept.stdio[3] as Readable);
  kept.stdin.end();
  assert.deepEqual(await exited(kept), [0, null]);
  await new Promise((resolve) => setImmediate(resolve));
  assert.equal(out(), "direct\n");
  assert.equal(info(), "fd\n");
});

/** Alive and not a zombie. */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/**
 * A process running `command` as `uid`, as one left behind by a killed sandbox's session in the user mode would;
 * its pid, once it runs as the uid.
 */
async function leftoverAs(uid: number, command: readonly string[] = ["/bin/sleep", "600"]): Promise<number> {
  const child = spawn(findSetpriv()!, [...setprivUserArgs({ uid, gid: uid }), "--", ...command], {
    detached: true,
    stdio: "ignore",
  });
  child.unref();
  const pid = child.pid!;
  for (
    let waited = 0;
    !new RegExp(`^Uid:\\s+${uid}\\s`, "m").test(readFileSync(`/proc/${pid}/status`, "utf8"));
    waited += 10
  ) {
    assert.ok(waited < 5_000, "the leftover never ran as its uid");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  return pid;
}

const asRootWithSetpriv =
  skip || (process.getuid?.() !== 0 ? "needs root" : findSetpriv() === undefined ? "needs setpriv" : false);

void it(
  "holds the session's uid for the session's life, having ended what it still ran, from a spare and when started itself",
  { skip: asRootWithSetpriv },
  async () => {
    const spawner = new KeeperSpawner({
      dir: path.join(root, "keepers-hold"),
      spares: 1,
      logger: recordingLogger().logger,
    });
    // Uids of this test process's own (the session-uid pool's test uses a range of its own likewise).
    const base = 3_500_000 + (process.pid % 100_000) * 2;
    // What a failure leaves running is ended with the test, which would otherwise wait on it.
    const leftovers: number[] = [];
    const keepers: KeptChild[] = [];
    try {
      const fromSpareHold = { uid: base, file: path.join(root, "spare.lock") };
      const fromSpareLeftover = await leftoverAs(fromSpareHold.uid);
      leftovers.push(fromSpareLeftover);
      const spared = await fromSpare(spawner, "session-hold-1", 'read line; echo "$line"', fromSpareHold);
      keepers.push(spared);
      const itselfHold = { uid: base + 1, file: path.join(root, "itself.lock") };
      const itselfLeftover = await leftoverAs(itselfHold.uid);
      leftovers.push(itselfLeftover);
      const dir = path.join(root, "session-hold-2");
      mkdirSync(dir);
      const itself = keeperSpawn({ dir, orphanMs: 60_000, spares: { take: () => undefined }, hold: itselfHold })(
        "/bin/sh",
        ["-c", "read line; ls -l /proc/self/fd"],
        { cwd: root, env: {}, stdio: ["pipe", "pipe", "pipe"] },
      );
      keepers.push(itself);
      for (const [kept, { file }, leftover] of [
        [spared, fromSpareHold, fromSpareLeftover],
        [itself, itselfHold, itselfLeftover],
      ] as const) {
        // Bound before the command runs, which it reads its line from only then.
        for (let waited = 0; !fileLocked(file); waited += 20) {
          assert.ok(waited < 5_000, `${file} was never locked`);
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        // Killed before the hold was taken: gone, or a zombie its init has yet to reap.
        for (let waited = 0; alive(leftover); waited += 10) {
          assert.ok(waited < 5_000, "what the uid still ran was not ended");
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
        const out = collect(kept.stdout);
        const ending = exited(kept);
        kept.stdin.write("go\n");
        kept.stdin.end();
        assert.deepEqual(await ending, [0, null]);
        await new Promise((resolve) => setImmediate(resolve));
        assert.equal(fileLocked(file), false, `${file} is let go with the session`);
        assert.equal(existsSync(file), false, `${file} is removed as it is let go`);
        // The command never holds the lock itself.
        if (kept === itself) assert.doesNotMatch(out(), /\.lock/);
      }
    } finally {
      for (const pid of leftovers) if (alive(pid)) process.kill(pid, "SIGKILL");
      for (const kept of keepers) kept.stdin.end();
      await spawner.close();
    }
  },
);

void it(
  "never leaves the session's uid locked by a killer that what the uid still runs stopped",
  { skip: asRootWithSetpriv },
  async () => {
    const uid = 3_700_000 + (process.pid % 100_000);
    const file = path.join(root, "stopped-killer.lock");
    // A process of the uid stopping every other one of it as fast as it can: the keeper's killer is one once it took the
    // uid, and this may stop it before it kills (Linux before 6.12, or a process outside the sessions' signal scope).
    const stopper = await leftoverAs(uid, ["/usr/bin/perl", "-e", 'for (;;) { kill "STOP", -1 }']);
    const dir = path.join(root, "stopped-killer");
    mkdirSync(dir);
    try {
      const kept = keeperSpawn({ dir, orphanMs: 60_000, spares: { take: () => undefined }, hold: { uid, file } })(
        "/bin/sh",
        ["-c", "read line; echo ran"],
        { cwd: root, env: {}, stdio: ["pipe", "pipe", "pipe"] },
      );
      const ending = exited(kept);
      kept.stdin.write("go\n");
      kept.stdin.end();
      // Either a killer got to kill first (the session ran), or five were stopped in turn and the keeper gave up (125):
      // never a keeper waiting for good on a stopped killer, nor a stopped killer keeping the lock.
      const [code] = await ending;
      assert.ok(code === 0 || code === 125, `the keeper ended with ${code}`);
      assert.equal(fileLocked(file), false, "nothing holds the uid's lock once its keeper is gone");
      const stoppedOfUid = readdirSync("/proc")
        .filter((name) => /^\d+$/.test(name))
        .filter((pid) => {
          try {
            const status = readFileSync(`/proc/${pid}/status`, "utf8");
            return new RegExp(`^Uid:\\s+${uid}\\s`, "m").test(status) && /^State:\s+T/m.test(status);
          } catch {
            return false;
          }
        });
      assert.deepEqual(stoppedOfUid, [], "no stopped killer is left behind");
    } finally {
      if (alive(stopper)) process.kill(stopper, "SIGKILL");
    }
  },
);
