// The runner gives each run a temporary folder of its own and fails a run
// that leaves anything in it, naming the entry and the file that makes it;
// either way the TMPDIR the runner itself was given is left as it was found.
// The real runner, on the fixtures' test files.
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runTests as runTestFiles } from "./support/runner.js";

const runTests = (file: string, tmp: string) => runTestFiles([`tools/test-infra/test/fixtures/${file}`], tmp);

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
