// What the sandbox does as a session's uid (killing its processes, removing
// its files) a process of that uid must not be able to take over: a helper
// it could ptrace would run whatever it was made to, with the sandbox's own
// limits, or never end.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { detectListenPortsDomain, listenPortsCommand } from "../src/landlock-launcher.js";
import { findSetpriv } from "../src/parent-death-launcher.js";
import { runAsSessionUser } from "../src/session-user-helper.js";
import { setprivUserArgs } from "../src/session-user-launcher.js";
import { removeAsUser } from "../src/session-user-files.js";
import { killAllProcessesOf } from "../src/session-user-processes.js";
import { systemCommand } from "../src/system-command.js";

const skip =
  process.getuid?.() !== 0
    ? "needs root"
    : systemCommand("perl") === undefined
      ? "needs perl"
      : spawnSync("python3", ["-c", ""]).status !== 0
        ? "needs python3"
        : false;

/** A uid of its own per test process, so test files running at once never meet in it. */
const UID = 3_500_000 + (process.pid % 100_000);
const user = { uid: UID, gid: UID };

/**
 * PTRACE_ATTACH to `pid` as the session's uid, then detach: "0" when it
 * attached, else the errno's name.
 */
function attachAsUser(pid: number): string {
  const attach = `
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
pid = int(sys.argv[1])
if libc.ptrace(16, pid, 0, 0) != 0:
    print(errno.errorcode[ctypes.get_errno()]); sys.exit(0)
os.waitpid(pid, 0x40000000)
libc.ptrace(17, pid, 0, 0)
print("0")
`;
  const run = spawnSync("python3", ["-c", attach, String(pid)], { uid: UID, gid: UID, encoding: "utf8", env: {} });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout.trim();
}

function commOf(pid: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/comm`, "utf8").trim();
  } catch {
    return undefined; // not a process, or gone meanwhile
  }
}

async function until(condition: () => boolean, what: string): Promise<void> {
  for (let waited = 0; !condition(); waited += 10) {
    if (waited > 10_000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

void describe("the sandbox's helpers that work as a session's uid", { skip }, () => {
  const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-user-helper-"));
  // The uid passes through, as it does through the sandbox root.
  chmodSync(scratch, 0o755);
  after(() => rmSync(scratch, { recursive: true, force: true }));

  void it("cannot be ptraced by a process of the uid, where a program started as the uid the plain way can", async () => {
    // The plain way, as the helpers used to start: spawn's uid option, then exec.
    const plain = spawn("sleep", ["30"], { uid: UID, gid: UID, stdio: "ignore" });
    try {
      await until(() => commOf(String(plain.pid)) === "sleep", "sleep's exec");
      assert.equal(
        attachAsUser(plain.pid!),
        "0",
        "a process of the uid could not attach to another: the test proves nothing",
      );
    } finally {
      plain.kill("SIGKILL");
    }

    const helper = runAsSessionUser({
      user,
      script: '$0 = "oz0-helper"; sleep 3;',
    });
    // The helper names itself once it runs as the uid: from then on, for its whole life, nothing of the uid can attach.
    let helperPid = 0;
    await until(() => {
      helperPid = Number(readdirSync("/proc").find((pid) => commOf(pid) === "oz0-helper") ?? 0);
      return helperPid !== 0;
    }, "the helper");
    const status = readFileSync(`/proc/${helperPid}/status`, "utf8");
    assert.match(status, new RegExp(`^Uid:\\s+${UID}\\s+${UID}\\s+${UID}\\s+${UID}$`, "m"));
    assert.match(status, new RegExp(`^Groups:\\s+${UID}\\s*$`, "m"), "supplementary groups: the gid alone");
    assert.match(status, /^CapEff:\s+0+$/m);
    assert.equal(attachAsUser(helperPid), "EPERM");
    assert.deepEqual(await helper, { status: 0, stderr: "", pastDeadline: false });
  });

  void it("ends a helper past its deadline, saying so (one a process of the uid stopped would never end)", async () => {
    const result = await runAsSessionUser({ user, script: "sleep 30;", deadlineMs: 200 });
    assert.deepEqual(
      { status: result.status, pastDeadline: result.pastDeadline },
      { status: null, pastDeadline: true },
    );
  });

  void it("refuses to run as uid 0", async () => {
    const result = await runAsSessionUser({ user: { uid: 0, gid: 0 }, script: "print STDERR 'ran';" });
    assert.notEqual(result.status, 0);
    assert.match(result.stderr, /not a session uid and gid: 0 0/);
  });

  void it("the killer ends every process of the uid, whatever group or session it moved to", async () => {
    const escaped = spawn("sleep", ["30"], { uid: UID, gid: UID, stdio: "ignore", detached: true });
    await until(() => commOf(String(escaped.pid)) === "sleep", "the escaped process");
    const exited = new Promise((resolve) => escaped.once("exit", (_code, signal) => resolve(signal)));
    assert.equal(await killAllProcessesOf(user), undefined);
    assert.equal(await exited, "SIGKILL");
  });

  // The killer and the remover run as the uid: a process of the uid could stop them (SIGSTOP), and the session would
  // never end. A user-mode session runs in the Landlock domain of session-listen-ports.ts, whose scope forbids it.
  void it("a process of the uid in a session's domain cannot signal one of the uid outside it, as the killer is", async () => {
    const rule = detectListenPortsDomain().landlock;
    assert.ok(rule, "this kernel has Landlock's network rules and scopes");
    const outside = spawn("sleep", ["30"], { uid: UID, gid: UID, stdio: "ignore", detached: true });
    try {
      await until(() => commOf(String(outside.pid)) === "sleep", "a process of the uid outside the domain");
      const [command, ...args] = listenPortsCommand(rule, [
        findSetpriv()!,
        ...setprivUserArgs(user),
        "--",
        "/usr/bin/perl",
        "-e",
        `print kill("STOP", ${outside.pid}) ? "stopped" : $! + 0`,
      ]);
      const run = spawnSync(command!, args, { encoding: "utf8" });
      assert.equal(run.status, 0, run.stderr);
      assert.equal(run.stdout, String(os.constants.errno.EPERM));
      assert.match(readFileSync(`/proc/${outside.pid}/status`, "utf8"), /^State:\s+S/m, "still sleeping, not stopped");
    } finally {
      outside.kill("SIGKILL");
    }
  });

  void it("the remover empties a tree the uid made hostile, and nothing outside it goes", async () => {
    const outside = path.join(scratch, "root-owned");
    mkdirSync(outside);
    writeFileSync(path.join(outside, "keep"), "root's");
    const dir = path.join(scratch, "work");
    mkdirSync(dir);
    chownSync(dir, UID, UID);
    // As the uid: an unreadable, unwritable subtree, a read-only file, links out to root's files, a very deep tree.
    const made = spawnSync(
      "/bin/sh",
      [
        "-c",
        'cd "$1" && mkdir -p a/b/c && echo x > a/b/c/f && echo y > ro && chmod 0400 ro && ' +
          'ln -s "$2" out && ln -s "$2/keep" keep-link && chmod 0 a/b && chmod 0 a',
        "sh",
        dir,
        outside,
      ],
      { uid: UID, gid: UID, encoding: "utf8" },
    );
    assert.equal(made.status, 0, made.stderr);
    // Deeper than PATH_MAX (4096 bytes) from the top: 300 levels of 20 characters.
    const deep = spawnSync(
      "perl",
      [
        "-e",
        'chdir $ARGV[0] or die; for (1 .. 300) { mkdir "d" x 20 or die; chdir "d" x 20 or die } open(my $f, ">", "f") or die',
        dir,
      ],
      { uid: UID, gid: UID, encoding: "utf8" },
    );
    assert.equal(deep.status, 0, deep.stderr);
    await removeAsUser([dir], user);
    assert.equal(existsSync(dir), false);
    assert.equal(readFileSync(path.join(outside, "keep"), "utf8"), "root's");
  });
});
