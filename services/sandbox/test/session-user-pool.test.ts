// The uids sessions run under (the user mode, bubblewrap run by root): held host-wide (two sandboxes never hand out the
// same uid), given back when the last session under one ends, and never
// carrying a process from one holder to the next.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import net from "node:net";
import { describe, it } from "node:test";
import { createLogger } from "@oz0/serving";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { SandboxError } from "../src/sandbox-errors.js";
import { setprivUserArgs } from "../src/session-user-launcher.js";
import { keptHoldName, SessionUserPool } from "../src/session-user-pool.js";

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

/**
 * A process running as `uid` that binds the abstract socket `name`, as a leftover could: and listens on it, or not,
 * or listens with its backlog filled by its own connections, never accepting.
 */
function holderAs(uid: number, name: string, how: "listening" | "bound" | "full"): number {
  const listen = { listening: "s.listen()\n", bound: "", full: "s.listen(0)\n" }[how];
  const fill =
    how === "full"
      ? `cs = [socket.socket(socket.AF_UNIX) for _ in range(3)]\nfor c in cs:\n  c.setblocking(False)\n  try: c.connect(${JSON.stringify(name)})\n  except OSError: pass\n`
      : "";
  const program = `import socket, time\ns = socket.socket(socket.AF_UNIX)\ns.bind(${JSON.stringify(name)})\n${listen}${fill}time.sleep(600)`;
  const child = spawn(
    findSetpriv()!,
    [...setprivUserArgs({ uid, gid: uid }), "--", "/usr/bin/python3", "-c", program],
    {
      detached: true,
      stdio: "ignore",
    },
  );
  child.unref();
  return child.pid!;
}

/** Whether `pid` holds the Unix socket named `path` in /proc/net/unix (an abstract one starts with @). */
function holds(pid: number, path: string): boolean {
  try {
    const inodes = readFileSync("/proc/net/unix", "utf8")
      .split("\n")
      .map((line) => line.trim().split(/\s+/))
      .filter((fields) => fields[7] === path)
      .map((fields) => fields[6]);
    return readdirSync(`/proc/${pid}/fd`).some((fd) => {
      try {
        return inodes.some((inode) => readlinkSync(`/proc/${pid}/fd/${fd}`) === `socket:[${inode}]`);
      } catch {
        return false;
      }
    });
  } catch {
    return false;
  }
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

  // A process that outlived its killed sandbox binds its own uid's hold (any abstract name is open to it), to be passed
  // over as another sandbox's running session by every start after: alive for good.
  // One whose backlog is full, never accepting, would hold a blocking connect (and the sandbox's start).
  for (const [offset, how] of [
    [1, "listening"],
    [2, "bound"],
    [3, "full"],
  ] as const)
    void it(`kills a leftover that holds its own uid's hold (${how}), and takes the uid back`, async () => {
      const uid = BASE + offset;
      const squatter = holderAs(uid, `\0oz0-sandbox-session-uid-${uid}`, how);
      try {
        await until(() => holds(squatter, `@oz0-sandbox-session-uid-${uid}`), "the leftover holds its uid's hold");
        const pool = new SessionUserPool({ range: { base: uid, count: 1 }, logger });
        assert.equal(await pool.clearLeftovers(), 1);
        await until(() => !processAlive(squatter), "the leftover was killed");
        const lease = await pool.acquire();
        assert.equal(lease.uid, uid, "the uid is the sandbox's to hand out again");
        await lease.release();
      } finally {
        if (processAlive(squatter)) process.kill(squatter, "SIGKILL");
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

  void it("kills a leftover of a uid that holds the uid's kept name itself: no kept session runs in the sandbox's PID namespace", async () => {
    // A user-mode session can bind any abstract name, its own uid's kept one too, hoping to outlive its sandbox.
    const uid = BASE + 3;
    const kept = net.createServer();
    await new Promise<void>((resolve) => kept.listen(`\0${keptHoldName(uid)}`, resolve));
    const leftover = processAs(uid);
    try {
      await until(() => runningAs(leftover, uid), "the leftover runs as its uid");
      assert.equal(await new SessionUserPool({ range: { base: uid, count: 1 }, logger }).clearLeftovers(), 1);
      await until(() => !processAlive(leftover), "the leftover was killed");
    } finally {
      kept.close();
      if (processAlive(leftover)) process.kill(leftover, "SIGKILL");
    }
  });

  void it("leaves a uid its session's keeper holds to it while no sandbox does, and lets the restarted one take it over", async () => {
    // A session under bubblewrap outlived its sandbox: its keeper holds the uid (session-keeper.ts), nothing else.
    const uid = BASE + 2;
    const range = { base: uid, count: 1 };
    const kept = net.createServer();
    await new Promise<void>((resolve) => kept.listen(`\0${keptHoldName(uid)}`, resolve));
    const session = await inPidNamespaceAs(uid);
    try {
      const another = new SessionUserPool({ range, logger });
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
      await new Promise<void>((resolve) => kept.close(() => resolve()));
      await lease.release();
      assert.equal(processAlive(session), true, "the uid is still the sharer's");
      await sharer.release();
      await until(() => !processAlive(session), "what the uid still ran was killed when it was given back");
    } finally {
      kept.close();
      if (processAlive(session)) process.kill(session, "SIGKILL");
    }
  });
  void it("at start-up removes what a uid nobody holds left in the node's shared places: files, System V IPC", async () => {
    // As a session of a killed sandbox leaves them: made by its uid, which then runs nothing. Until the uid is next
    // taken they would hold memory (a segment, a file in /dev/shm) and some of the node's few System V ids.
    const uid = BASE + 1;
    const made = spawnSync(
      findSetpriv()!,
      [
        ...setprivUserArgs({ uid, gid: uid }),
        "--",
        // Debian's: a python3 first on PATH may be in root's home (pyenv), closed to the uid.
        "/usr/bin/python3",
        "-c",
        [
          "import ctypes, json, os",
          "libc = ctypes.CDLL(None, use_errno=True)",
          "shm, sem = libc.shmget(0, 4096, 0o1600), libc.semget(0, 1, 0o1600)",
          "file = '/dev/shm/oz0-left-%d' % os.getpid()",
          "open(file, 'w').write('x')",
          "print(json.dumps({'shm': shm, 'sem': sem, 'file': file}))",
        ].join("\n"),
      ],
      { encoding: "utf8" },
    );
    assert.equal(made.status, 0, made.stderr);
    const left = JSON.parse(made.stdout) as { shm: number; sem: number; file: string };
    assert.ok(systemVIds("shm").includes(left.shm) && systemVIds("sem").includes(left.sem) && existsSync(left.file));
    // A uid that runs nothing is no kept session's: binding its kept name (anyone may) does not keep its leftovers.
    const kept = net.createServer();
    await new Promise<void>((resolve) => kept.listen(`\0${keptHoldName(uid)}`, resolve));
    try {
      assert.equal(await new SessionUserPool({ range: { base: uid, count: 1 }, logger }).clearLeftovers(), 1);
    } finally {
      kept.close();
    }
    assert.equal(systemVIds("shm").includes(left.shm), false, "the segment was removed");
    assert.equal(systemVIds("sem").includes(left.sem), false, "the semaphore set was removed");
    assert.equal(existsSync(left.file), false, "the file in /dev/shm was removed");
  });
});
