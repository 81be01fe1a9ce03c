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

/** The project's own files: a test that runs probe.mjs when a patch adds it, and one that judges value.mjs. */
const PROJECT: Record<string, string> = {
  "package.json": '{ "type": "module" }\n',
  "value.mjs": "export const value = 2;\n",
  "value.test.mjs": [
    'import assert from "node:assert/strict";',
    'import { test } from "node:test";',
    'import { value } from "./value.mjs";',
    'test("value", () => assert.equal(value, 2));',
    "",
  ].join("\n"),
  "probe.test.mjs": [
    'import { existsSync } from "node:fs";',
    'import { test } from "node:test";',
    'test("probe", async () => {',
    '  if (existsSync(new URL("./probe.mjs", import.meta.url))) await import("./probe.mjs");',
    "});",
    "",
  ].join("\n"),
};

before(async () => {
  work = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-check-test-"));
  home = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-check-home-"));
  stack = await startEmbeddedStack({ home });
  const project = path.join(work, "proj");
  mkdirSync(project);
  for (const [name, text] of Object.entries(PROJECT)) writeFileSync(path.join(project, name), text);
});
after(async () => {
  await stack?.close();
  rmSync(work, { recursive: true, force: true });
  rmSync(home, { recursive: true, force: true });
});

/** A patch (written to a file) that adds `proj/<name>` holding `lines`, and replaces whole project files. */
function patch(options: { adds?: Record<string, string[]>; replaces?: Record<string, string> }): string {
  const file = path.join(work, `${Object.keys({ ...options.adds, ...options.replaces }).join("+")}.patch`);
  const parts: string[] = [];
  for (const [name, lines] of Object.entries(options.adds ?? {}))
    parts.push(
      `diff --git a/proj/${name} b/proj/${name}`,
      "new file mode 100644",
      "--- /dev/null",
      `+++ b/proj/${name}`,
      `@@ -0,0 +1,${lines.length} @@`,
      ...lines.map((l) => `+${l}`),
    );
  for (const [name, text] of Object.entries(options.replaces ?? {})) {
    const old = PROJECT[name]!.trimEnd().split("\n");
    const now = text.trimEnd().split("\n");
    parts.push(
      `diff --git a/proj/${name} b/proj/${name}`,
      `--- a/proj/${name}`,
      `+++ b/proj/${name}`,
      `@@ -1,${old.length} +1,${now.length} @@`,
      ...old.map((l) => `-${l}`),
      ...now.map((l) => `+${l}`),
    );
  }
  writeFileSync(file, `${parts.join("\n")}\n`);
  return file;
}

const check = (patch: string, deadlineMs?: number) =>
  checkPatchInSandbox({
    ...(deadlineMs !== undefined ? { deadlineMs } : {}),
    sandboxUrl: stack.urls.sandbox,
    token: stackTokenFor(stack.credentials, "orchestrator", "sandbox"),
    home,
    project: path.join(work, "proj"),
    patch,
  });

void test("code the patch adds runs in a sandbox session: not the demo's environment, credentials or files", async () => {
  process.env.OZ0_DEMO_PLANTED = planted;
  const marker = path.join(work, "written-by-the-patch");
  const owner = path.join(home, "credentials", "owner");
  try {
    const result = await check(
      patch({
        adds: {
          "probe.mjs": [
            'import { readFileSync, writeFileSync } from "node:fs";',
            'console.log(`planted: ${process.env.OZ0_DEMO_PLANTED ?? "none"}`);',
            'let owner = "unreadable";',
            `try { owner = readFileSync(${JSON.stringify(owner)}, "utf8").slice(0, 8); } catch {}`,
            "console.log(`owner: ${owner}`);",
            `try { writeFileSync(${JSON.stringify(marker)}, "x"); } catch {}`,
          ],
        },
      }),
    );
    assert.equal(result.passed, true, `${result.error}\n${result.output}`);
    assert.match(result.output, /planted: none/);
    assert.match(result.output, /owner: unreadable/);
    assert.equal(result.output.includes(planted), false);
    assert.equal(existsSync(marker), false, "the patch's code wrote to the demo's machine");
  } finally {
    delete process.env.OZ0_DEMO_PLANTED;
  }
});

void test("the project's own tests judge the patch: one that breaks the code fails, and rewriting the tests does not help", async () => {
  const broken = await check(patch({ replaces: { "value.mjs": "export const value = 3;\n" } }));
  assert.equal(broken.passed, false);
  assert.match(broken.error, /node --test exited with 1/);
  assert.match(broken.output, /fail 1/);
  // The same break, with the test changed to expect it, and a test of its own that passes: still failing.
  const rewritten = await check(
    patch({
      replaces: {
        "value.mjs": "export const value = 3;\n",
        "value.test.mjs": PROJECT["value.test.mjs"]!.replace("equal(value, 2)", "equal(value, 3)"),
      },
      adds: { "extra.test.mjs": ['import { test } from "node:test";', 'test("extra", () => {});'] },
    }),
  );
  assert.equal(rewritten.passed, false, rewritten.output);
  assert.match(rewritten.output, /fail 1/);
  const bad = path.join(work, "bad.patch");
  writeFileSync(bad, "not a patch\n");
  const unapplied = await check(bad);
  assert.equal(unapplied.passed, false);
  assert.match(unapplied.error, /git apply changes\.patch failed/);
});

void test("a patch whose code never returns is stopped at the check's deadline, and fails it", async () => {
  const hung = await check(
    patch({ adds: { "probe.mjs": ["await new Promise(() => setInterval(() => {}, 1000));"] } }),
    3_000,
  );
  assert.equal(hung.passed, false);
  assert.match(hung.error, /the tests ran past 3 s and were stopped/);
});
