// Kept sessions' internal directories are emptied and reused by later
// sessions instead of made and removed each time (issue 24). What must hold:
// a reused directory holds nothing of the session before it (its keeper's
// output, its log, its record, its answers), and only a directory whose
// keeper wrote its exit is reused.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { startSandbox } from "../src/index.js";
import { InternalDirectoryPool, resolveSessionPaths } from "../src/session-directories.js";
import { SandboxError } from "../src/sandbox-errors.js";
import { createKeeperOutputs } from "../src/session-keeper.js";
import { testCredentials } from "@oz0/serving/testing";
import { runToEnd, scenarioStart, SessionStream, startTestSandbox } from "./sandbox-test-kit.js";

/** An ended kept session's internal directory, as its keeper and the sandbox leave it. */
function endedSessionDir(dir: string, options: { exited: boolean }): void {
  mkdirSync(path.join(dir, "run"), { recursive: true });
  mkdirSync(path.join(dir, "snapshot.git", "objects"), { recursive: true });
  for (const name of ["stdout", "stderr", "fd3", "session.json", "log.bin", "answers", "owner", "stdin"])
    writeFileSync(path.join(dir, name), `${name} of the session before\n`);
  writeFileSync(path.join(dir, "snapshot.git", "objects", "x"), "x");
  writeFileSync(path.join(dir, "run", "left"), "x");
  if (options.exited) writeFileSync(path.join(dir, "exit"), "0 \n");
}

void describe("internal directory pool", () => {
  void it("empties an ended session's directory (the sandbox's files truncated, the rest removed) and moves it to the next session", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 1 });
    const first = path.join(root, "internal", "first");
    endedSessionDir(first, { exited: true });
    const inode = statSync(first).ino;

    assert.equal(await pool.give(first), true);
    assert.equal(existsSync(first), false);
    const next = path.join(root, "internal", "next");
    assert.equal(pool.take(next), true);
    assert.equal(statSync(next).ino, inode, "the same directory, not a new one");
    assert.deepEqual(readdirSync(next).sort(), ["answers", "exit.tmp", "log.bin", "session.json"]);
    // exit.tmp is the keeper's to write whole (it truncates it) and to rename; what it held is no output of the session.
    for (const name of readdirSync(next).filter((name) => name !== "exit.tmp"))
      assert.equal(statSync(path.join(next, name)).size, 0, `${name} is empty`);
    assert.equal(pool.take(path.join(root, "internal", "third")), false, "one spare, taken");
  });

  void it("keeps the keeper's output files, emptied, and its stdin FIFO, of a session sealed from them", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 1 });
    const first = path.join(root, "internal", "first");
    endedSessionDir(first, { exited: true });
    rmSync(path.join(first, "stdin"));
    execFileSync("mkfifo", ["-m", "600", path.join(first, "stdin")]);
    const inodes = Object.fromEntries(
      ["stdout", "stderr", "fd3", "stdin"].map((name) => [name, statSync(path.join(first, name)).ino]),
    );

    assert.equal(await pool.give(first, { sealed: true }), true);
    const next = path.join(root, "internal", "next");
    assert.equal(pool.take(next), true);
    assert.deepEqual(readdirSync(next).sort(), [
      "answers",
      "exit.tmp",
      "fd3",
      "log.bin",
      "run",
      "session.json",
      "stderr",
      "stdin",
      "stdout",
    ]);
    assert.equal(statSync(path.join(next, "stdin")).isFIFO(), true);
    for (const [name, inode] of Object.entries(inodes)) {
      assert.equal(statSync(path.join(next, name)).ino, inode, `${name}: the same file, not a new one`);
      assert.equal(statSync(path.join(next, name)).size, 0, `${name} is empty`);
    }
  });

  void it("gives the next session new stdio files after a session not sealed from them (one a previous run started): a mode or an extended attribute its harness set through its stdout does not reach it", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 1 });
    const first = path.join(root, "internal", "first");
    endedSessionDir(first, { exited: true });
    // What a harness can do to the files it holds as fds 1 and 2 (fchmod, fsetxattr), done here by path.
    for (const name of ["stdout", "stderr", "fd3"]) {
      chmodSync(path.join(first, name), 0o644);
      execFileSync("python3", [
        "-c",
        "import os, sys; os.setxattr(sys.argv[1], 'user.note', b'for the next job')",
        path.join(first, name),
      ]);
    }
    assert.equal(await pool.give(first), true);
    const next = path.join(root, "internal", "next");
    assert.equal(pool.take(next), true);
    createKeeperOutputs(next, 1);
    for (const name of ["stdout", "stderr", "fd3"]) {
      const file = path.join(next, name);
      assert.equal(statSync(file).mode & 0o777, 0o600, `${name}: the keeper's mode`);
      const attributes = execFileSync("python3", ["-c", "import os, sys; print(os.listxattr(sys.argv[1]))", file], {
        encoding: "utf8",
      });
      assert.equal(attributes.trim(), "[]", `${name} carries no attribute of the session before`);
    }
  });

  void it("keeps the emptied socket folder of a session that could not write it, and removes one it could", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 2 });
    const sealed = path.join(root, "internal", "sealed");
    endedSessionDir(sealed, { exited: true });
    const socketDir = statSync(path.join(sealed, "run")).ino;
    assert.equal(await pool.give(sealed, { sealed: true }), true);
    const next = path.join(root, "internal", "next");
    assert.equal(pool.take(next), true);
    assert.equal(statSync(path.join(next, "run")).ino, socketDir, "the same folder");
    assert.deepEqual(readdirSync(path.join(next, "run")), [], "emptied");

    const writable = path.join(root, "internal", "writable");
    endedSessionDir(writable, { exited: true });
    assert.equal(await pool.give(writable), true);
    const after = path.join(root, "internal", "after");
    assert.equal(pool.take(after), true);
    assert.equal(existsSync(path.join(after, "run")), false, "a folder the session could mark is made anew");
  });

  void it("reuses no directory whose keeper did not write its exit, keeps at most its maximum, and never replaces an existing target", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 1 });
    const running = path.join(root, "internal", "running");
    endedSessionDir(running, { exited: false });
    assert.equal(await pool.give(running), false);
    assert.match(readdirSync(running).join(","), /stdout/, "left as it was, for the caller to remove");

    const [a, b] = ["a", "b"].map((name) => path.join(root, "internal", name)) as [string, string];
    endedSessionDir(a, { exited: true });
    endedSessionDir(b, { exited: true });
    assert.equal(await pool.give(a), true);
    assert.equal(await pool.give(b), false, "past its maximum");

    const taken = path.join(root, "internal", "taken");
    mkdirSync(taken);
    assert.equal(pool.take(taken), false, "an existing directory is not replaced");
    assert.deepEqual(readdirSync(path.join(root, "recycled")).length, 1, "the spare stays for the next session");
  });

  void it("sessions ending together keep no more spares than its maximum", async (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    const pool = new InternalDirectoryPool({ dir: path.join(root, "recycled"), max: 2 });
    const ended = ["a", "b", "c", "d"].map((name) => path.join(root, "internal", name));
    for (const dir of ended) endedSessionDir(dir, { exited: true });
    const kept = await Promise.all(ended.map((dir) => pool.give(dir)));
    assert.equal(kept.filter(Boolean).length, 2);
    assert.equal(readdirSync(path.join(root, "recycled")).length, 2);
  });

  void it("under bubblewrap, the harness's stdout and stderr are pipes: the keeper's files, reused by the next session, carry no mode or attribute it tried to set", async (t) => {
    const sandbox = await startTestSandbox({ isolation: "bwrap" });
    t.after(() => sandbox.close());
    const { root } = sandbox;
    const marked = await runToEnd(sandbox.client, scenarioStart({ mode: "mark-stdio" }, {}, { sessionId: "marked" }));
    assert.equal(marked.exited().status, SessionStatus.COMPLETED);
    const report = JSON.parse(marked.texts()[0] ?? "{}") as Record<
      string,
      { fifo: boolean; chmod: string; xattr: string }
    >;
    for (const fd of ["1", "2"]) assert.equal(report[fd]?.fifo, true, `fd ${fd} is a pipe: ${JSON.stringify(report)}`);

    const spares = readdirSync(path.join(root, "recycled"));
    assert.equal(spares.length, 1, "the ended session's internal directory is kept");
    const spare = path.join(root, "recycled", spares[0]!);
    for (const name of ["stdout", "stderr"]) {
      const file = path.join(spare, name);
      assert.equal(statSync(file).mode & 0o777, 0o600, `${name}: the keeper's mode`);
      const attributes = execFileSync("python3", ["-c", "import os, sys; print(os.listxattr(sys.argv[1]))", file], {
        encoding: "utf8",
      });
      assert.equal(attributes.trim(), "[]", `${name} carries no attribute the harness set`);
    }
    // The next session runs in that folder, with those very files (no new inode), and reads only its own output.
    const inode = statSync(path.join(spare, "stdout")).ino;
    const fifo = statSync(path.join(spare, "stdin")).ino;
    const next = await runToEnd(sandbox.client, scenarioStart({ mode: "complete" }, {}, { sessionId: "next" }));
    assert.equal(next.exited().status, SessionStatus.COMPLETED);
    assert.deepEqual(next.texts(), ["working"]);
    const [again] = readdirSync(path.join(root, "recycled"));
    assert.equal(statSync(path.join(root, "recycled", again!, "stdout")).ino, inode, "the same stdout file");
    assert.equal(statSync(path.join(root, "recycled", again!, "stdin")).ino, fifo, "the same stdin FIFO");
  });

  void it("no session may ask for a working or state directory inside the sandbox's own folders (internal/, recycled/)", (t) => {
    const root = mkdtempSync(path.join(os.tmpdir(), "oz0-pool-"));
    t.after(() => rmSync(root, { recursive: true, force: true }));
    for (const own of ["internal", "recycled"]) {
      mkdirSync(path.join(root, own), { recursive: true });
      // A spare's name is not predictable, but any directory there could be swapped for (or emptied as) another session's.
      const requested = path.join(realpathSync(root), own, "next");
      for (const field of ["workingDir", "stateDir"] as const) {
        assert.throws(
          () => resolveSessionPaths({ root, sessionId: "s1", workingDir: "", stateDir: "", [field]: requested }),
          (error: unknown) =>
            error instanceof SandboxError && error.message.includes(`sandbox's own directory ${own}/`),
          `${field} in ${own}/`,
        );
      }
    }
  });

  void it("under bubblewrap, a session started after another ended runs in its emptied internal directory and sees nothing of it; a restart drops the spares", async (t) => {
    const first = await startTestSandbox({ isolation: "bwrap" });
    const { root } = first;
    t.after(() => rmSync(root, { recursive: true, force: true }));
    let firstClosed = false;
    t.after(async () => {
      if (!firstClosed) await first.sandbox.close();
    });

    // Stderr lines, a permission answered, then exit 1: the keeper's stderr, the log, the answers and exit all written.
    const before = new SessionStream(first.client, {
      message: { case: "start", value: scenarioStart({ mode: "stderr", lines: 2, ask: true }) },
    });
    await before.waitFor((m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest", "p1");
    before.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
    await before.finished;
    assert.deepEqual(before.exited().how, { case: "exitCode", value: 1 });
    const spares = readdirSync(path.join(root, "recycled"));
    assert.equal(spares.length, 1, "the ended session's internal directory is kept");
    const inode = statSync(path.join(root, "recycled", spares[0]!)).ino;

    const after = new SessionStream(first.client, {
      message: { case: "start", value: scenarioStart({ mode: "permission" }, {}, { sessionId: "after-1" }) },
    });
    await after.waitFor((m) => m.message.case === "event" && m.message.value.event.case === "permissionRequest", "p1");
    assert.equal(statSync(path.join(root, "internal", "after-1")).ino, inode, "the spare was reused");
    after.send({ message: { case: "permissionAnswer", value: { id: "p1", allow: true } } });
    await after.finished;
    assert.equal(after.exited().status, SessionStatus.COMPLETED);
    assert.deepEqual(
      after.received.map((m) => Number(m.seq)),
      after.received.map((_, i) => i + 1),
      "its own seqs from 1",
    );
    assert.equal(
      after.received.some((m) => m.message.case === "stderr"),
      false,
      "no stderr of the session before",
    );
    assert.deepEqual(after.texts(), ["answer p1 allow=true outcome=OUTCOME_ANSWERED"]);

    // A restarted sandbox on the same root starts with no spares (they belong to no session).
    await first.sandbox.close();
    firstClosed = true;
    assert.equal(readdirSync(path.join(root, "recycled")).length, 1);
    const restarted = await startSandbox({
      port: 0,
      root,
      isolation: "bwrap",
      cancelGraceMs: 2_000,
      auth: testCredentials.settingsFor("sandbox"),
    });
    try {
      assert.deepEqual(readdirSync(path.join(root, "recycled")), []);
    } finally {
      await restarted.close();
    }
  });
});
