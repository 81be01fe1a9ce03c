// A run passes only when every test file's results reached the runner whole:
// a file whose process ends before its last results are read fails the run,
// by name, though Node's runner counted it passed; and the runner's forced
// exit of each file's process (--test-force-exit) loses none of a file's
// results, which it did on a busy pipe (nodejs/node#64833).
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runTests } from "./support/runner.js";

void test("a run in which a file's process ends before its last results fails, naming the file", async (t) => {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-runner-test-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const { code, out } = await runTests(["tools/test-infra/test/fixtures/exits-early.test.ts"], tmp);
  assert.match(out, /^ℹ fail 0$/m, "Node's runner itself reports no failure");
  assert.notEqual(code, 0, out);
  assert.match(out, /the results of 1 test file\(s\) did not all reach the runner/);
  assert.match(out, /tools\/test-infra\/test\/fixtures\/exits-early\.test\.ts: its summary never reached the runner/);
});

void test("many files of many fast tests report every result, every time", async (t) => {
  // Many small frames from many processes at once: what filled the pipes and
  // lost a file's last results at its forced exit in about every run.
  const FILES = 30;
  const TESTS = 60;
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-runner-test-"));
  t.after(() => rmSync(tmp, { recursive: true, force: true }));
  const dir = path.join(tmp, "many");
  mkdirSync(dir);
  const files = Array.from({ length: FILES }, (_, f) => {
    const file = path.join(dir, `f${f}.test.ts`);
    const tests = Array.from(
      { length: TESTS },
      (_, i) =>
        `void test("file ${f}, test ${i}, with a name long enough to make its frames worth sending", () => {});`,
    );
    writeFileSync(file, ['import { test } from "node:test";', ...tests].join("\n"));
    return file;
  });
  const { code, out } = await runTests(files, tmp);
  assert.equal(code, 0, out.slice(-3000));
  assert.match(out, new RegExp(`^ℹ tests ${FILES * TESTS}$`, "m"));
});
