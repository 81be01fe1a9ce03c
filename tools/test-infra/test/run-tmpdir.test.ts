// The runner gives each run a temporary folder of its own and fails a run
// that leaves anything in it, naming the entry and the file that makes it;
// either way the TMPDIR the runner itself was given is left as it was found.
// The real runner, on the fixtures' test files.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const runner = path.join(repoRoot, "tools/test-infra/bin/run-tests.mjs");

function runTests(file: string, tmp: string): Promise<{ code: number; out: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
  // Set by the runner of this test; the inner run would report to it instead of its own output.
  delete env["NODE_TEST_CONTEXT"];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [runner, `tools/test-infra/test/fixtures/${file}`], {
      cwd: repoRoot,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => resolve({ code: code ?? 1, out }));
  });
}

void test("a run whose test leaves a folder behind fails, naming the folder and the file that makes it", async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-runner-test-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const { code, out } = await runTests("leaves-a-folder.test.ts", tmp);
  assert.notEqual(code, 0, out);
  assert.match(out, /the tests left 1 entry in the run's temporary folder/);
  assert.match(
    out,
    /oz0-fixture-leftover-\w{6} +\(named in tools\/test-infra\/test\/fixtures\/leaves-a-folder\.test\.ts\b/,
  );
  assert.deepEqual(readdirSync(tmp), [], "the run's folder is removed all the same");
});

void test("a run whose tests remove what they make passes, and leaves the TMPDIR it was given as it was", async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-runner-test-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const { code, out } = await runTests("cleans-up.test.ts", tmp);
  assert.equal(code, 0, out);
  assert.doesNotMatch(out, /left \d+ entr/);
  assert.deepEqual(readdirSync(tmp), []);
});
