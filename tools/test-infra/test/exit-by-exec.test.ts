// Every test file's process (and the runner's) ends process.exit() by execve:
// Node's own teardown can hang for good at that moment (nodejs/node#54918),
// which held a CI run until its 90 minutes ran out. The hang itself is a race
// no test can call up on demand; what these tests hold is that the exit takes
// the path that has no join to hang in, and keeps what an exit must keep.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { repoRoot, runTests } from "./support/runner.js";

const exitByExec = path.join(repoRoot, "tools/test-infra/bin/exit-by-exec.mjs");

/** Runs `script` under the module; what it printed and how it ended. */
function run(script: string): { status: number | null; stdout: string } {
  const { status, stdout } = spawnSync(
    process.execPath,
    ["--import", exitByExec, "--input-type=module", "-e", script],
    {
      encoding: "utf8",
    },
  );
  return { status, stdout };
}

// The process.execve diagnostics channel is published to just before the
// system call, so a subscriber sees the exit take that path.
const watchExec = `
  import diagnostics from "node:diagnostics_channel";
  diagnostics.subscribe("process.execve", ({ args }) => process.stdout.write("execve " + args.join(" ") + "\\n"));
  process.on("exit", (code) => process.stdout.write("exit listener " + code + "\\n"));
`;

void test("process.exit() ends the process by execve, after its exit listeners, with its exit code", () => {
  const { status, stdout } = run(`${watchExec} process.exit(7);`);
  assert.equal(status, 7);
  assert.equal(stdout, "exit listener 7\nexecve sh -c exit 7\n");
});

void test("an exit code set beforehand, or past one byte, ends as exit(3) would keep it", () => {
  assert.equal(run(`${watchExec} process.exitCode = 3; process.exit();`).status, 3);
  assert.equal(run(`${watchExec} process.exit(300);`).status, 300 & 0xff);
});

void test("a worker thread's process.exit() still ends only the worker", () => {
  const { status, stdout } = run(`${watchExec}
    import { Worker } from "node:worker_threads";
    new Worker("process.exit(5)", { eval: true }).on("exit", (code) => process.exit(code === 5 ? 0 : 1));`);
  assert.equal(status, 0, stdout);
  assert.equal(stdout, "exit listener 0\nexecve sh -c exit 0\n");
});

void test("the runner's files end that way, and a failing file still fails the run", async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-exit-by-exec-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const execs = path.join(tmp, "execs");
  const file = (name: string, ok: boolean): string => {
    const at = path.join(tmp, `${name}.test.ts`);
    writeFileSync(
      at,
      [
        'import diagnostics from "node:diagnostics_channel";',
        'import { appendFileSync } from "node:fs";',
        'import { test } from "node:test";',
        `diagnostics.subscribe("process.execve", () => appendFileSync(${JSON.stringify(execs)}, "${name} "));`,
        `void test("${name}", () => { if (!${ok}) throw new Error("as it should"); });`,
      ].join("\n"),
    );
    return at;
  };
  const passes = await runTests([file("passes", true)], tmp);
  assert.equal(passes.code, 0, passes.out.slice(-2000));
  const fails = await runTests([file("fails", false)], tmp);
  assert.notEqual(fails.code, 0);
  assert.match(fails.out, /^ℹ fail 1$/m);
  assert.equal(readFileSync(execs, "utf8"), "passes fails ");
});
