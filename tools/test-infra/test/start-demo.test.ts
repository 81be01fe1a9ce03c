// `npm start`'s demo as a new user runs it (after `npm run build`), with a
// fresh data directory and no provider key: on Claude Code by default, and on
// the fake harness with OZ0_DEMO_HARNESS=fake, and in the sandbox's `user`
// mode (a root node without bubblewrap). Each run must end with the
// job's patch making the dates project's test pass on a fresh copy, and
// nothing left in the temporary folder the demo was given.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const startDemo = path.join(repoRoot, "tools/test-infra/bin/start-demo.mjs");

interface DemoRun {
  code: number;
  out: string;
  leftInTmp: string[];
  /** The isolation mode the stack's sandbox ran sessions in: its start-up line's `isolation` field. */
  isolation: string | undefined;
  /** What the printed console link's page answered, fetched while the demo ran. */
  consolePage: Promise<{ status: number; contentType: string } | undefined>;
}

function runDemo(options: { harness?: string; isolation?: "user" } = {}): Promise<DemoRun> {
  const { harness, isolation } = options;
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-test-"));
  // Sessions under uids of their own pass through the data directory to their working directories.
  if (isolation === "user") chmodSync(home, 0o755);
  const tmp = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-tmp-"));
  const env: NodeJS.ProcessEnv = { ...process.env, OZ0_HOME: home, TMPDIR: tmp };
  // Offline, as a user without a key: the scripted model answers.
  delete env["ANTHROPIC_API_KEY"];
  delete env["OPENAI_API_KEY"];
  delete env["OZ0_URL"];
  // Set by this test runner; the demo's own `node --test` would report to it instead of printing TAP.
  delete env["NODE_TEST_CONTEXT"];
  if (harness) env["OZ0_DEMO_HARNESS"] = harness;
  else delete env["OZ0_DEMO_HARNESS"];
  if (isolation) env["OZ0_ISOLATION"] = isolation;
  else delete env["OZ0_ISOLATION"];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [startDemo], { cwd: repoRoot, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let consolePage: DemoRun["consolePage"] = Promise.resolve(undefined);
    let fetching = false;
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const link = /^console: (http:\/\/127\.0\.0\.1:\d+)\/#\/login\?code=\S+$/m.exec(out);
      if (link && !fetching) {
        fetching = true;
        consolePage = fetch(`${link[1]}/`).then((r) => ({
          status: r.status,
          contentType: r.headers.get("content-type") ?? "",
        }));
      }
    });
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => {
      let isolation: string | undefined;
      try {
        const log = readFileSync(path.join(home, "logs", "sandbox.log"), "utf8");
        isolation = /"isolation":"(\w+)"/.exec(log)?.[1];
      } catch {
        // no sandbox started
      }
      if (!process.env["OZ0_KEEP_TEST_HOME"]) rmSync(home, { recursive: true, force: true });
      const leftInTmp = readdirSync(tmp);
      rmSync(tmp, { recursive: true, force: true });
      resolve({ code: code ?? 1, out, leftInTmp, isolation, consolePage });
    });
  });
}

void test("npm start runs claude-fixer on Claude Code with the scripted model, and the patched test passes", async () => {
  const { code, out, leftInTmp, consolePage } = await runDemo();
  assert.equal(code, 0, out);
  assert.deepEqual(leftInTmp, [], "npm start left these in its temporary folder");
  assert.match(out, /the SCRIPTED model \(no ANTHROPIC_API_KEY set\).*demo-script-claude\.json/);
  assert.match(out, /installed plugin harness-claude 0\.1\.0/);
  assert.match(out, /\$ oz0 run claude-fixer /);
  // The console link is printed before the run, and its page is served while the demo runs.
  assert.ok(out.indexOf("console: http://127.0.0.1:") < out.indexOf("$ oz0 run claude-fixer"), out);
  assert.deepEqual(await consolePage, { status: 200, contentType: "text/html; charset=utf-8" });
  // Claude Code's own Bash tool read, edited and tested the code.
  assert.match(out, /▸ Bash: Run cat dates\/dates\.mjs/);
  assert.match(out, /▸ Bash: Run cd dates && node --test/);
  assert.match(out, /result \(completed, 4 turns\)/);
  // The demo's own test run on the patched copy (TAP before Node 23, spec after).
  assert.match(out.slice(out.indexOf("$ node --test   (in a fresh copy")), /^[#ℹ] pass 2\n[#ℹ] fail 0$/m);
  assert.match(out, /The test passes\./);
  // Piped, not a terminal: no formatting codes.
  assert.equal(out.includes("\x1b["), false, "escape codes in piped output");
});

void test("OZ0_DEMO_HARNESS=fake runs the fake-harness fixer instead, and the patched test passes", async () => {
  const { code, out, leftInTmp } = await runDemo({ harness: "fake" });
  assert.equal(code, 0, out);
  assert.deepEqual(leftInTmp, [], "npm start left these in its temporary folder");
  assert.match(out, /the SCRIPTED model \(no ANTHROPIC_API_KEY set\).*demo-script\.json/);
  assert.match(out, /\$ oz0 run fixer /);
  assert.match(out, /▸ write_file/);
  // The demo's own test run on the patched copy (TAP before Node 23, spec after).
  assert.match(out.slice(out.indexOf("$ node --test   (in a fresh copy")), /^[#ℹ] pass 2\n[#ℹ] fail 0$/m);
  assert.match(out, /The test passes\./);
});

void test("an unknown OZ0_DEMO_HARNESS is refused with a usage error", async () => {
  const { code, out } = await runDemo({ harness: "bogus" });
  assert.equal(code, 2, out);
  assert.match(out, /OZ0_DEMO_HARNESS must be "claude" \(the default\) or "fake"/);
});

// Where bubblewrap cannot run, a root node runs sessions under uids of their own, on the node's file system: the
// harness plugin's copy in the data directory must be theirs to reach (it once was not: MODULE_NOT_FOUND).
void test(
  "npm start in the user mode (OZ0_ISOLATION=user) runs claude-fixer on Claude Code, and the patched test passes",
  { skip: process.getuid?.() !== 0 && "the user mode needs root" },
  async () => {
    const { code, out, isolation } = await runDemo({ isolation: "user" });
    assert.equal(code, 0, out);
    assert.equal(isolation, "user");
    assert.match(out, /result \(completed, 4 turns\)/);
    assert.match(out.slice(out.indexOf("$ node --test   (in a fresh copy")), /^[#ℹ] pass 2\n[#ℹ] fail 0$/m);
  },
);
