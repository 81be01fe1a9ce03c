// The uids sessions run under (the user mode, bubblewrap run by root): held host-wide (two sandboxes never hand out the
// same uid), given back when the last session under one ends, and never
// carrying a process from one holder to the next.
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { createLogger } from "@oz0/serving";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { SandboxError } from "../src/sandbox-errors.js";
import { setprivUserArgs } from "../src/session-user-launcher.js";
import { SessionUserPool } from "../src/session-user-pool.js";
import { fileLocked, lockHolder, recordingLogger } from "./sandbox-test-kit.js";

const skip =
  process.getuid?.() !== 0 ? "needs root" : findSetpriv() === undefined ? "needs setpriv (util-linux)" : false;
const logger = createLogger({ name: "session-user-pool-test", level: "silent" });

/** A range of its own per test process, so test files running at once never meet in it. */
const BASE = 3_000_000 + (process.pid % 100_000) * 4;

/** Alive and not a zombie (a killed orphan stays a zombie until some init reaps it). */
function processAlive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** Running as `uid` already: setpriv starts as root and switches before it execs. */
function runningAs(pid: number, uid: number): boolean {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    return /^Name:\s+sleep$/m.test(status) && new RegExp(`^Uid:\\s+${uid}\\s`, "m").test(status);
  } catch {
    return false;
  }
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  assert(condition(), what);
}

/** A process running as `uid` in a session of its own, as a harness's escaped descendant would. */
function processAs(uid: number): number {
  const child = spawn(findSetpriv()!, [...setprivUserArgs({ uid, gid: uid }), "--", "/bin/sleep", "600"], {
    detached: true,
    stdio: "ignore",
  });
  child.unref();
  return child.pid!;
}

/** The process group `pid` is in (/proc/<pid>/stat's fifth field). */
function processGroupOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
}

/** What a Python program run as `uid` printed, as JSON; it must succeed. */
function pythonAs(uid: number, lines: string[], args: string[] = []): unknown {
  const run = spawnSync(
    findSetpriv()!,
    // Debian's: a python3 first on PATH may be in root's home (pyenv), closed to the uid.
    [...setprivUserArgs({ uid, gid: uid }), "--", "/usr/bin/python3", "-c", lines.join("\n"), ...args],
    { encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

/** Ends a lock holder and waits until it is gone (its lock with it). */
async function release(holder: ChildProcess): Promise<void> {
  if (holder.exitCode !== null || holder.signalCode !== null) return;
  const gone = new Promise((resolve) => holder.once("exit", resolve));
  holder.kill("SIGKILL");
  await gone;
}

/** A process running as `uid` in a PID namespace of its own, as a kept bubblewrap session's do; its pid on the node. */
async function inPidNamespaceAs(uid: number): Promise<number> {
  const outer = spawn(
    "unshare",
    ["--pid", "--fork", findSetpriv()!, ...setprivUserArgs({ uid, gid: uid }), "--", "/bin/sleep", "600"],
    {
      detached: true,
      stdio: "ignore",
    },
  );
  outer.unref();
  let inner: number | undefined;
  await until(() => {
    const children = readFileSync(`/proc/${outer.pid}/task/${outer.pid}/children`, "utf8").trim();
    inner = children === "" ? undefined : Number(children.split(" ")[0]);
    return inner !== undefined && runningAs(inner, uid);
  }, "the session runs as its uid, in a PID namespace of its own");
  return inner!;
}

/** The ids in one of the node's System V IPC tables (/proc/sysvipc/shm, sem). */
function systemVIds(table: "shm" | "sem"): number[] {
  return readFileSync(`/proc/sysvipc/${table}`, "utf8")
    .trim()
    .split("\n")
    .slice(1)
    .map((row) => Number(row.trim().split(/\s+/)[1]));
}

void describe("session uids", { skip }, () => {
  void it("hands out each uid to one holder on the host at a time, and again once released", async () => {
    const range = { base: BASE, count: 2 };
    // Two pools are two sandboxes: they share the range through the kernel, not through memory.
    const first = new SessionUserPool({ range, logger });
    const second = new SessionUserPool({ range, logger });
    const a = await first.acquire();
    const b = await second.acquire();
    assert.notEqual(a.uid, b.uid);
    assert.equal(a.gid, a.uid);
    await assert.rejects(
      first.acquire(),
      (error: unknown) =>
        error instanceof SandboxError &&
        error.code === "resource_exhausted" &&
        /OZ0_SANDBOX_UID_BASE/.test(error.message),
    );
    // A shared claim keeps the uid held until both are released.
    const shared = a.share();
    await a.release();
    await assert.rejects(second.acquire(), /every session uid/);
    await shared.release();
    const again = await second.acquire();
    assert.equal(again.uid, a.uid);
    await again.release();
    await b.release();
  });

  void it("kills what a uid still runs when its last holder releases it, and what a dead sandbox left when it is next taken", async () => {
    const range = { base: BASE + 2, count: 1 };
    const pool = new SessionUserPool({ range, logger });
    const lease = await pool.acquire();
    const escaped = processAs(lease.uid);
    await until(() => runningAs(escaped, lease.uid), "the process runs as the uid");
    await lease.release();
    await until(() => !processAlive(escaped), "the released uid's process was killed");

    // Left behind by a sandbox that was killed (nobody holds the uid): the next holder starts clean.
    const leftover = processAs(range.base);
    await until(() => runningAs(leftover, range.base), "the leftover runs as the uid");
    const next = await pool.acquire();
    await until(() => !processAlive(leftover), "the leftover was killed before the uid was handed out");
    await next.release();
  });

  void it("at start-up kills the leftovers of uids nobody holds, and leaves another sandbox's running sessions alone", async () => {
    const range = { base: BASE, count: 2 };
    const other = new SessionUserPool({ range, logger });
    const running = await other.acquire();
    const alive = processAs(running.uid);
    const freeUid = running.uid === BASE ? BASE + 1 : BASE;
    const leftover = processAs(freeUid);
    await until(() => runningAs(alive, running.uid) && runningAs(leftover, freeUid), "both run as their uids");
    const starting = new SessionUserPool({ range, logger });
    assert.equal(await starting.clearLeftovers(), 1);
    await until(() => !processAlive(leftover), "the leftover was killed");
    assert.equal(processAlive(alive), true, "another sandbox's session was left alone");
    await running.release();
    await until(() => !processAlive(alive), "its own sandbox killed it when it gave the uid back");
  });

  // The holds were abstract socket names once, which any process could bind: a session bound every free uid's, and no
  // session could start on the host until it ended; a leftover bound its own uid's, to be passed over for good.
  void it("keeps its uids' locks where no process of a session uid can open, list, lock or replace them", async () => {
    const uid = BASE + 1;
    const pool = new SessionUserPool({ range: { base: uid, count: 1 }, logger });
    const keptFile = pool.keptLockFile(uid);
    const dir = path.dirname(keptFile);
    const tried = pythonAs(
      uid,
      [
        "import fcntl, json, os, sys",
        "dir, kept, uid = sys.argv[1], sys.argv[2], sys.argv[3]",
        "def attempt(what):",
        "  try: what(); return 'done'",
        "  except OSError as e: return e.__class__.__name__",
        "print(json.dumps({",
        "  'list': attempt(lambda: os.listdir(dir)),",
        "  'open': attempt(lambda: open(os.path.join(dir, uid), 'a')),",
        "  'lock': attempt(lambda: fcntl.flock(open(kept, 'a'), fcntl.LOCK_EX)),",
        "  'replace': attempt(lambda: os.rename(dir, dir + '.x')),",
        "}))",
      ],
      [dir, keptFile, String(uid)],
    );
    assert.deepEqual(tried, {
      list: "PermissionError",
      open: "PermissionError",
      lock: "PermissionError",
      replace: "PermissionError",
    });
    const lease = await pool.acquire();
    assert.equal(lease.uid, uid);
    assert.equal(fileLocked(path.join(dir, String(uid))), true, "the uid's lock is held while it is out");
    await lease.release();
    await until(() => !existsSync(path.join(dir, String(uid))), "let go with it, its file removed");
  });

  void it("refuses a lock folder that another uid could enter or replace, saying what to do", () => {
    const parent = mkdtempSync(path.join(os.tmpdir(), "oz0-uid-locks-"));
    try {
      const lockDir = path.join(parent, "locks");
      new SessionUserPool({ range: { base: BASE, count: 1 }, logger, lockDir });
      chmodSync(lockDir, 0o755);
      assert.throws(
        () => new SessionUserPool({ range: { base: BASE, count: 1 }, logger, lockDir }),
        (error: unknown) =>
          error instanceof SandboxError &&
          error.code === "failed_precondition" &&
          error.message.includes(`${lockDir} must be a directory owned by uid 0 that nobody else can enter`) &&
          error.message.includes("mode 0755") &&
          /remove it and restart the sandbox/.test(error.message),
      );
      chmodSync(lockDir, 0o700);
      chmodSync(parent, 0o777);
      assert.throws(
        () => new SessionUserPool({ range: { base: BASE, count: 1 }, logger, lockDir }),
        new RegExp(`${parent} must be a directory owned by uid 0 that nobody else can write`),
      );
      // One that cannot be made (a read-only root filesystem's /run): the setting to use instead.
      writeFileSync(path.join(parent, "file"), "");
      assert.throws(
        () =>
          new SessionUserPool({ range: { base: BASE, count: 1 }, logger, lockDir: path.join(parent, "file", "locks") }),
        /cannot make the session uid lock folder .*(EEXIST|ENOTDIR).*point OZ0_SANDBOX_UID_LOCK_DIR at a writable folder/,
      );
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  void it("takes its locks again when their helper dies, so another sandbox still cannot take a uid in use", async () => {
    const range = { base: BASE + 2, count: 1 };
    const { logger: recording, lines } = recordingLogger();
    const pool = new SessionUserPool({ range, logger: recording });
    const lease = await pool.acquire();
    const first = pool.lockHelperPid!;
    // What stops the sandbox's process group (Ctrl-C, systemd's SIGTERM to the unit) leaves the helper holding the
    // uids until the sandbox has ended their sessions: it ignores them, in a process group of its own.
    assert.notEqual(processGroupOf(first), processGroupOf(process.pid));
    process.kill(first, "SIGTERM");
    process.kill(first, "SIGINT");
    // A helper that lived under a second is started again a second later (one that cannot start at all must not spin).
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    assert.equal(processAlive(first), true, "the helper outlived SIGTERM and SIGINT");
    process.kill(first, "SIGKILL");
    const lockFile = path.join(path.dirname(pool.keptLockFile(range.base)), String(range.base));
    await until(() => pool.lockHelperPid !== undefined && pool.lockHelperPid !== first, "a new helper runs");
    await until(() => fileLocked(lockFile), "the new helper holds the uid again");
    assert.ok(lines.some((line) => line.msg === "the session uid lock helper died: taking its locks again"));
    await assert.rejects(new SessionUserPool({ range, logger }).acquire(), /every session uid from/);
    await lease.release();
    const again = await new SessionUserPool({ range, logger }).acquire();
    assert.equal(again.uid, range.base);
    await again.release();
    // Given back without waiting for the helper, which removes the file as it lets go.
    await until(() => !existsSync(lockFile), "a lock's file goes with it: the range leaves no files behind");
    // A sandbox that stops ends its helper, which would otherwise wait for the process's end.
    const helper = pool.lockHelperPid!;
    pool.close();
    await until(() => !processAlive(helper), "the helper ended with its pool");
    await assert.rejects(pool.acquire(), /shutting down/);
  });

  void it("kills or removes nothing of a uid another sandbox may have taken while its lock helper was down", async () => {
    const range = { base: BASE + 3, count: 1 };
    const { logger: recording, lines } = recordingLogger();
    const pool = new SessionUserPool({ range, logger: recording });
    const lease = await pool.acquire();
    // Dead young: taken again only a second later, and another sandbox takes the uid meanwhile.
    process.kill(pool.lockHelperPid!, "SIGKILL");
    await until(() => pool.lockHelperPid === undefined, "the helper is gone");
    const other = await new SessionUserPool({ range, logger }).acquire();
    assert.equal(other.uid, range.base);
    const theirs = processAs(range.base);
    try {
      await until(() => runningAs(theirs, range.base), "the other sandbox's session runs as the uid");
      // Before the retake has answered: the kill waits for it, and it fails.
      await lease.killAll();
      assert.equal(processAlive(theirs), true, "a session's own kill killed nothing of the uid");
      assert.ok(lines.some((line) => /could not be taken again after its helper died/.test(line.msg)));
      assert.ok(lines.some((line) => /may no longer hold alone/.test(line.msg)));
      await lease.release();
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(processAlive(theirs), true, "nor did giving it back");
      await other.release();
      await until(() => !processAlive(theirs), "its own sandbox killed it when it gave the uid back");
    } finally {
      if (processAlive(theirs)) process.kill(theirs, "SIGKILL");
      pool.close();
    }
  });

  void it("passes over a uid whose lock file cannot be locked, and logs why", async () => {
    const parent = mkdtempSync(path.join(os.tmpdir(), "oz0-uid-locks-"));
    try {
      const lockDir = path.join(parent, "locks");
      const { logger: recording, lines } = recordingLogger();
      const pool = new SessionUserPool({ range: { base: BASE, count: 2 }, logger: recording, lockDir });
      // Not a file: every open of it fails (as a full /run would fail one uid's).
      mkdirSync(path.join(lockDir, String(BASE)));
      mkdirSync(path.join(lockDir, String(BASE + 1)));
      await assert.rejects(pool.acquire(), /every session uid from/);
      assert.ok(lines.some((line) => line.msg === "could not lock a session uid's file: uid passed over"));
      rmSync(path.join(lockDir, String(BASE + 1)), { recursive: true });
      const lease = await pool.acquire();
      assert.equal(lease.uid, BASE + 1);
      await lease.release();
      pool.close();
    } finally {
      rmSync(parent, { recursive: true, force: true });
    }
  });

  // A process of the uid left alive would share the uid with the next session, which could then ptrace or signal it.
  void it("keeps a uid whose processes it could not kill from every pool, until a later kill works", async () => {
    const uid = BASE + 1;
    const range = { base: uid, count: 1 };
    let failing = true;
    const kills: number[] = [];
    const pool = new SessionUserPool({
      range,
      logger,
      quarantineRetryMs: 50,
      killProcesses: (user) => {
        kills.push(user.uid);
        return Promise.resolve(failing ? new Error("stopped past its deadline") : undefined);
      },
    });
    failing = false;
    const lease = await pool.acquire();
    failing = true;
    await lease.release();
    await assert.rejects(new SessionUserPool({ range, logger }).acquire(), /every session uid from/, "still held");
    await assert.rejects(pool.acquire(), /every session uid from/, "not this pool's to hand out either");
    const before = kills.length;
    await until(() => kills.length >= before + 2, "killed again, and again");
    failing = false;
    // Given back once a kill worked: the next start gets it.
    let again: Awaited<ReturnType<SessionUserPool["acquire"]>> | undefined;
    for (let i = 0; i < 80 && again === undefined; i++) {
      again = await new SessionUserPool({ range, logger }).acquire().catch(() => undefined);
      if (again === undefined) await new Promise((resolve) => setTimeout(resolve, 25));
    }
    assert.equal(again?.uid, uid, "given back once a kill worked");
    await again.release();
  });

  void it("leaves a uid its session's keeper holds to it while no sandbox does, and lets the restarted one take it over", async () => {
    // A session under bubblewrap outlived its sandbox: its keeper holds the uid (session-keeper.ts), nothing else.
    const uid = BASE + 2;
    const range = { base: uid, count: 1 };
    const another = new SessionUserPool({ range, logger });
    const kept = await lockHolder(another.keptLockFile(uid));
    const session = await inPidNamespaceAs(uid);
    try {
      assert.equal(await another.clearLeftovers(), 0);
      await assert.rejects(another.acquire(), (error: unknown) => error instanceof SandboxError);
      assert.equal(processAlive(session), true, "another sandbox neither killed it nor handed its uid out");

      const restarted = new SessionUserPool({ range, logger });
      const lease = await restarted.adopt(uid);
      assert.equal(lease.uid, uid);
      // A session taken over with it that worked in its directory runs under the same uid: a second claim.
      const sharer = await restarted.adopt(uid);
      assert.equal(sharer.uid, uid);
      await assert.rejects(
        new SessionUserPool({ range, logger }).adopt(uid),
        /held by another session/,
        "a third sandbox cannot take it over too",
      );
      await assert.rejects(restarted.adopt(uid + 1), /not in this sandbox's session uid range/);
      // The sessions ended: the keeper let go, and the sandbox gives the uid back with the last claim.
      await release(kept);
      await lease.release();
      assert.equal(processAlive(session), true, "the uid is still the sharer's");
      await sharer.release();
      await until(() => !processAlive(session), "what the uid still ran was killed when it was given back");
    } finally {
      await release(kept);
      if (processAlive(session)) process.kill(session, "SIGKILL");
    }
  });
  void it("at start-up removes what a uid nobody holds left in the node's shared places: files, System V IPC", async () => {
    // As a session of a killed sandbox leaves them: made by its uid, which then runs nothing. Until the uid is next
    // taken they would hold memory (a segment, a file in /dev/shm) and some of the node's few System V ids.
    const uid = BASE + 1;
    const left = pythonAs(uid, [
      "import ctypes, json, os",
      "libc = ctypes.CDLL(None, use_errno=True)",
      "shm, sem = libc.shmget(0, 4096, 0o1600), libc.semget(0, 1, 0o1600)",
      "file = '/dev/shm/oz0-left-%d' % os.getpid()",
      "open(file, 'w').write('x')",
      "print(json.dumps({'shm': shm, 'sem': sem, 'file': file}))",
    ]) as { shm: number; sem: number; file: string };
    assert.ok(systemVIds("shm").includes(left.shm) && systemVIds("sem").includes(left.sem) && existsSync(left.file));
    assert.equal(await new SessionUserPool({ range: { base: uid, count: 1 }, logger }).clearLeftovers(), 1);
    assert.equal(systemVIds("shm").includes(left.shm), false, "the segment was removed");
    assert.equal(systemVIds("sem").includes(left.sem), false, "the semaphore set was removed");
    assert.equal(existsSync(left.file), false, "the file in /dev/shm was removed");
  });
});
