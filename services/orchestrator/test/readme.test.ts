// The README's quick start runs as written (each command on an embedded
// stack), and `oz0 dev` serves the other commands through its discovery file.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { cliMain, eventually, packageDir, repoRoot } from "./support/test-stack.js";

const PATH = `${path.join(repoRoot, "node_modules", ".bin")}${path.delimiter}${process.env.PATH ?? ""}`;

function quickStart(): string {
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Quick start"));
  const block = /```sh\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "the quick start has a sh block");
  return block[1]!;
}

void test("the README's quick start runs as written", () => {
  const script = `set -e\ntrap 'rm -rf "\${OZ0_HOME:-/nonexistent-oz0-home}"' EXIT\n${quickStart()}`;
  const result = spawnSync("bash", ["-c", script], { cwd: repoRoot, env: { ...process.env, PATH, OZ0_URL: "" }, encoding: "utf8" });
  assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
  assert.match(result.stdout, /installed plugin harness-claude 0\.1\.0/);
  assert.match(result.stdout, /installed plugin example 0\.1\.0/);
  assert.match(result.stdout, /claude-fixer\s+v1\s+harness:claude-agent-sdk/);
  assert.match(result.stdout, /fixer\s+v1\s+harness:fake/);
  assert.match(result.stdout, /job job_\w+ succeeded/);
  assert.match(result.stderr, /no provider key is configured/);
  assert.match(result.stdout, /job_\w+\s+succeeded\s+fixer v1/);
});

void test("oz0 dev runs the stack in the foreground and the other commands find it", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-test-"));
  const env = { ...process.env, PATH, OZ0_HOME: home, OZ0_URL: "" };
  const dev = spawn(process.execPath, [cliMain, "dev", "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  dev.stdout.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => dev.on("exit", (code) => resolve(code)));
  try {
    await eventually(async () => (out.includes("ready:") ? true : undefined));
    const url = /orchestrator\s+(http:\/\/\S+)/.exec(out)?.[1];
    assert.ok(url, out);
    assert.equal((JSON.parse(readFileSync(path.join(home, "dev.json"), "utf8")) as { url: string }).url, url);
    const oz0 = (...args: string[]) => spawnSync(process.execPath, [cliMain, ...args], { cwd: repoRoot, env, encoding: "utf8" });
    // The example plugin's claude-fixer needs the harness-claude plugin installed first.
    assert.equal(oz0("plugin", "install", "plugins/harness-claude").status, 0);
    assert.equal(oz0("plugin", "install", "examples/plugins/example").status, 0);
    const detached = oz0("run", "fixer", "Say hello", "--detach");
    assert.equal(detached.status, 0, detached.stderr);
    const jobId = detached.stdout.trim();
    const watched = oz0("jobs", "watch", jobId);
    assert.equal(watched.status, 0, watched.stdout + watched.stderr);
    assert.match(watched.stdout, /scripted provider's reply/);
    const listed = oz0("jobs", "list");
    assert.match(listed.stdout, new RegExp(`${jobId}\\s+succeeded`));
  } finally {
    dev.kill("SIGINT");
    assert.equal(await exited, 0);
    assert.equal(existsSync(path.join(home, "dev.json")), false, "the discovery file is removed");
    rmSync(home, { recursive: true, force: true });
  }
});

void test("the README's auth config is one the services accept, granting what it says", async () => {
  const { grantedRoles, parsePeopleConfig } = await import("@oz0/serving");
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Who may call what"));
  const block = /```yaml\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "the section has the auth config");
  const config = parsePeopleConfig(block[1]!, "the README's auth config");
  assert.equal(config.oidc?.usernameClaim, "sub");
  assert.deepEqual(grantedRoles(config, "alice", []), ["approver"]);
  assert.deepEqual(grantedRoles(config, "someone", ["platform", "staff"]), ["admin", "viewer"]);
  assert.equal(config.tokens?.[0]?.sha256, createHash("sha256").update("test").digest("hex"));
});
