// npm start's check of the job's patch runs the patched project's tests in a
// session of the stack's sandbox. The patch is code the agent wrote: run on
// the demo's machine, a test it adds read the shell's environment (a provider
// key), the stack's owner credential and key-encryption key, and wrote where
// the user can (attacker review).
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { stackTokenFor } from "@oz0/serving";
import { startEmbeddedStack } from "@oz0/orchestrator";
import { checkPatchInSandbox } from "../demo-check/check-in-sandbox.mjs";

const planted = `sk-planted-${process.pid}-${Date.now()}`;
let stack: Awaited<ReturnType<typeof startEmbeddedStack>>;
let work: string;
let home: string;

before(async () => {
  work = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-check-test-"));
  home = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-check-home-"));
  stack = await startEmbeddedStack({ home });
  const project = path.join(work, "proj");
  mkdirSync(project);
  writeFileSync(path.join(project, "package.json"), '{ "type": "module" }\n');
});
after(async () => {
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
  rmSync(home, { recursive: true, force: true });
});

/** A patch that adds one file, `proj/<name>`, holding `lines`. */
function patchAdding(name: string, lines: string[]): string {
  const file = path.join(work, `${name}.patch`);
  writeFileSync(
    file,
    [
      `diff --git a/proj/${name} b/proj/${name}`,
      "new file mode 100644",
      "--- /dev/null",
      `+++ b/proj/${name}`,
      `@@ -0,0 +1,${lines.length} @@`,
      ...lines.map((l) => `+${l}`),
      "",
    ].join("\n"),
  );
  return file;
}

const check = (patch: string) =>
  checkPatchInSandbox({
    sandboxUrl: stack.urls.sandbox,
    token: stackTokenFor(stack.credentials, "orchestrator", "sandbox"),
    home,
    project: path.join(work, "proj"),
    patch,
  });

void test("a test the patch adds runs in a sandbox session: not the demo's environment, credentials or files", async () => {
  process.env.OZ0_DEMO_PLANTED = planted;
  const marker = path.join(work, "written-by-the-patch");
  const owner = path.join(home, "credentials", "owner");
  try {
    const result = await check(
      patchAdding("probe.test.mjs", [
        'import { readFileSync, writeFileSync } from "node:fs";',
        'import { test } from "node:test";',
        'test("probe", () => {',
        '  console.log(`planted: ${process.env.OZ0_DEMO_PLANTED ?? "none"}`);',
        '  let owner = "unreadable";',
        `  try { owner = readFileSync(${JSON.stringify(owner)}, "utf8").slice(0, 8); } catch {}`,
        "  console.log(`owner: ${owner}`);",
        `  try { writeFileSync(${JSON.stringify(marker)}, "x"); } catch {}`,
        "});",
      ]),
    );
    assert.equal(result.passed, true, `${result.error}\n${result.output}`);
    assert.match(result.output, /planted: none/);
    assert.match(result.output, /owner: unreadable/);
    assert.equal(result.output.includes(planted), false);
    assert.equal(existsSync(marker), false, "the patch's test wrote to the demo's machine");
  } finally {
    delete process.env.OZ0_DEMO_PLANTED;
  }
});

void test("a patch whose tests fail, or that does not apply, is reported as not passing, saying why", async () => {
  const failing = await check(
    patchAdding("fails.test.mjs", [
      'import { test } from "node:test";',
      'test("fails", () => { throw new Error("no"); });',
    ]),
  );
  assert.equal(failing.passed, false);
  assert.match(failing.error, /node --test exited with 1/);
  assert.match(failing.output, /fail 1/);
  const bad = path.join(work, "bad.patch");
  writeFileSync(bad, "not a patch\n");
  const unapplied = await check(bad);
  assert.equal(unapplied.passed, false);
  assert.match(unapplied.error, /git apply changes\.patch failed/);
});
