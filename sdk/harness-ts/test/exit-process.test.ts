// A harness (runHarness's exitWhenDone, a cancel) and the oz0 CLI end their
// process with exitProcess: process.exit() can hang for good in Node's
// teardown (nodejs/node#54918), and a harness that hangs so is reported
// did_not_exit and killed after its grace. The hang is a race no test can
// call up on demand; these tests hold that the exit takes the path with no
// teardown to hang in, and keeps what an exit must keep.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema } from "@oz0/proto/oz0/harness/v1/harness_pb";
import type { SessionEvent } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startHostSession } from "@oz0/harness/host";

const exitModule = pathToFileURL(fileURLToPath(new URL("../src/harness/exit-process.ts", import.meta.url))).href;
const lingering = fileURLToPath(new URL("./fixtures/sdk/lingering-harness.mjs", import.meta.url));

/** Runs `script` (after it: exitProcess imported, the execve path and exit listeners printed); how it ended. */
function run(script: string, nodeArgs: string[] = [], cwd = process.cwd()): { status: number | null; stdout: string } {
  const prelude = `
    import diagnostics from "node:diagnostics_channel";
    import { exitProcess, installExitByExecve } from ${JSON.stringify(exitModule)};
    diagnostics.subscribe("process.execve", ({ args }) => process.stdout.write("execve " + args.join(" ") + "\\n"));
    process.on("exit", (code) => process.stdout.write("exit listener " + code + "\\n"));
  `;
  const { status, stdout, stderr } = spawnSync(
    process.execPath,
    [...nodeArgs, "--import", "tsx", "--input-type=module", "-e", `${prelude}\n${script}`],
    { encoding: "utf8", cwd },
  );
  assert.equal(stderr.replace(/^\(node:\d+\) ExperimentalWarning.*\n(.*--trace-warnings.*\n)?/gm, ""), "");
  return { status, stdout };
}

void describe("exitProcess", () => {
  void it("ends the process by execve, after the exit listeners, with the exit code", () => {
    const { status, stdout } = run(`setInterval(() => {}, 60_000); exitProcess(7);`);
    assert.equal(status, 7);
    assert.equal(stdout, "exit listener 7\nexecve sh -c exit 7\n");
  });

  void it("keeps an exit code a listener sets, and of a code past one byte what exit(3) keeps", () => {
    const changed = run(`process.on("exit", () => { process.exitCode = 4; }); exitProcess(1);`);
    assert.equal(changed.status, 4);
    assert.match(changed.stdout, /execve sh -c exit 4\n$/);
    assert.equal(run(`exitProcess(300);`).status, 300 & 0xff);
    assert.equal(run(`process.exitCode = 3; exitProcess();`).status, 3);
  });

  void it("in a worker thread ends only the worker, as process.exit() does", () => {
    const { status, stdout } = run(`
      import { Worker } from "node:worker_threads";
      const source = "import(" + ${JSON.stringify(JSON.stringify(exitModule))} + ").then((m) => m.exitProcess(5))";
      new Worker(source, { eval: true }).on("exit", (code) => exitProcess(code === 5 ? 0 : 1));`);
    assert.equal(status, 0, stdout);
    assert.equal(stdout, "exit listener 0\nexecve sh -c exit 0\n");
  });

  void it("installed, ends every later process.exit() so, and in a worker leaves Node's exit", () => {
    const { status, stdout } = run(`
      import { Worker } from "node:worker_threads";
      if (!installExitByExecve()) throw new Error("not installed");
      const source = "import(" + ${JSON.stringify(JSON.stringify(exitModule))} + ").then((m) => process.exit(m.installExitByExecve() ? 9 : 6))";
      new Worker(source, { eval: true }).on("exit", (code) => process.exit(code));`);
    assert.equal(status, 6, "the worker's install declined, and its exit ended only it");
    assert.equal(stdout, "exit listener 6\nexecve sh -c exit 6\n");
  });

  void it("exits by execve when flags only tune a profiler that is off (node --test gives every file's process those)", () => {
    const { status, stdout } = run(`exitProcess(3);`, ["--cpu-prof-interval=1000", "--heap-prof-interval=524288"]);
    assert.equal(status, 3);
    assert.match(stdout, /execve sh -c exit 3\n$/);
  });

  void it("exits Node's way when a CPU profile is to be written at exit, and the profile is written", (t) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-exit-profile-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const { status, stdout } = run(`exitProcess(6);`, ["--cpu-prof", "--cpu-prof-dir", dir]);
    assert.equal(status, 6);
    assert.equal(stdout, "exit listener 6\n", "no execve");
    assert.equal(readdirSync(dir).filter((f) => f.endsWith(".cpuprofile")).length, 1);
  });
});

void describe("exitProcess, beside what else runs at exit", () => {
  void it("runs what wraps the 'exit' listeners (signal-exit's callbacks: lock and temp-file clean-up) first", () => {
    // signal-exit runs its callbacks after the 'exit' listeners, from a wrapper of process.emit.
    const { status, stdout } = run(`
      const emit = process.emit;
      process.emit = function (event, ...args) {
        const answer = emit.call(this, event, ...args);
        if (event === "exit") process.stdout.write("after the exit listeners\\n");
        return answer;
      };
      exitProcess(2);`);
    assert.equal(status, 2);
    assert.equal(stdout, "exit listener 2\nafter the exit listeners\nexecve sh -c exit 2\n");
  });

  void it("leaves a pipe it shares blocking, as Node's own exit does, for the next writer", (t) => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-exit-pipe-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const script = path.join(dir, "write-then-exit.mjs");
    writeFileSync(
      script,
      `import { exitProcess } from ${JSON.stringify(exitModule)};\nprocess.stdout.write("x");\nexitProcess(0);\n`,
    );
    // The next writer fills the pipe while its reader waits: on a pipe left non-blocking, its write fails (EAGAIN).
    const shell = `{ "$0" --import tsx "$1"; head -c 3000000 /dev/zero || echo "head failed" >&2; } | (sleep 1; wc -c)`;
    const { status, stdout, stderr } = spawnSync("sh", ["-c", shell, process.execPath, script], { encoding: "utf8" });
    assert.equal(stderr, "");
    assert.equal(status, 0);
    assert.equal(stdout.trim(), String(3_000_000 + 1));
  });

  void it("exits Node's way where /bin/sh cannot be run (an execve that fails would abort)", () => {
    // /bin is /usr/bin here: bubblewrap hides it behind an empty folder, and leaves everything else as it is.
    const { status, stdout } = spawnSync(
      "bwrap",
      [
        "--dev-bind",
        "/",
        "/",
        "--tmpfs",
        "/usr/bin",
        process.execPath,
        "--input-type=module",
        "-e",
        `import { exitProcess } from ${JSON.stringify(exitModule.replace(/\.ts$/, ".js").replace("/src/", "/dist/"))};
         process.on("exit", (code) => process.stdout.write("exit listener " + code + "\\n"));
         exitProcess(3);`,
      ],
      { encoding: "utf8" },
    );
    assert.equal(status, 3);
    assert.equal(stdout, "exit listener 3\n");
  });
});

/** Runs the lingering harness to its outcome; `cancel` cancels it once it has said something. */
async function runLingering(mode: "done" | "wait" | "throw") {
  const events: SessionEvent[] = [];
  const session = startHostSession({
    command: [process.execPath, lingering, mode],
    cwd: process.cwd(),
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    request: create(SessionRequestSchema, { protocolVersion: 1, sessionId: "s1", jobId: "j1", input: "hello" }),
    graceMs: 10_000,
    onEvent: (event) => {
      events.push(event);
      if (event.event.case === "text") session.cancel("stop");
    },
  });
  return { outcome: await session.outcome, events };
}

void describe("a harness on runHarness", () => {
  void it("with exitWhenDone exits by execve once its result is out, though a handle is left open", async () => {
    const { outcome } = await runLingering("done");
    assert.equal(outcome.status, "completed", outcome.stderrTail);
    assert.equal(outcome.result?.text, "done");
    assert.equal(outcome.exitCode, 0);
    assert.match(outcome.stderrTail, /exit listener 0\nexecve sh -c exit 0\n$/);
  });

  void it("whose work throws exits by execve with code 1, after its error result", async () => {
    const { outcome } = await runLingering("throw");
    assert.equal(outcome.result?.error, "the work failed", outcome.stderrTail);
    assert.equal(outcome.exitCode, 1);
    assert.match(outcome.stderrTail, /exit listener 1\nexecve sh -c exit 1\n$/);
  });

  void it("cancelled, exits by execve after its cancelled result, within the grace", async () => {
    const { outcome } = await runLingering("wait");
    assert.equal(outcome.status, "cancelled", outcome.stderrTail);
    assert.equal(outcome.exitCode, 0);
    assert.equal(outcome.error, undefined, "no did_not_exit");
    assert.match(outcome.stderrTail, /exit listener 0\nexecve sh -c exit 0\n$/);
  });
});
