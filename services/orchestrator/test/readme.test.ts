// The README's quick start runs as written (each command on an embedded
// stack), and `oz0 dev` serves the other commands through its discovery file.
// The root README's CLI blocks run as written too, offline, and the job they
// run leaves a patch that makes the dates project's test pass.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { parse } from "yaml";
import { validateDocument } from "../src/plugins/yaml-validation.js";
import { SHIPPED_HARNESSES } from "../src/plugins/plugin-registry.js";
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
  const result = spawnSync("bash", ["-c", script], {
    cwd: repoRoot,
    env: { ...process.env, PATH, OZ0_URL: "" },
    encoding: "utf8",
  });
  assert.equal(result.status, 0, `${result.stdout}\n${result.stderr}`);
  assert.match(result.stdout, /installed plugin harness-claude 0\.1\.0/);
  assert.match(result.stdout, /installed plugin example 0\.1\.0/);
  assert.match(result.stdout, /claude-fixer\s+v1\s+harness:claude-agent-sdk/);
  assert.match(result.stdout, /fixer\s+v1\s+harness:fake/);
  assert.match(result.stdout, /job job_\w+ succeeded/);
  assert.match(
    result.stderr,
    /the scripted model answers every model call from examples\/plugins\/example\/demo-script\.json/,
  );
  // The script's write reached the job's patch: the fix, not a canned reply.
  assert.match(result.stdout, /▸ write_file/);
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
    // The console's one-time link: the page at the orchestrator's own address, the code in the fragment.
    const consoleLink = /^console\s+(\S+)/m.exec(out)?.[1];
    assert.ok(consoleLink?.startsWith(`${url}/#/login?code=`), out);
    assert.equal((await fetch(`${url}/`)).status, 200);
    const oz0 = (...args: string[]) =>
      spawnSync(process.execPath, [cliMain, ...args], { cwd: repoRoot, env, encoding: "utf8" });
    // The example plugin's claude-fixer needs the harness-claude plugin installed first, which a refusal names.
    const early = oz0("plugin", "install", "examples/plugins/example");
    assert.equal(early.status, 1);
    assert.match(
      early.stderr,
      /no installed plugin declares harness "claude-agent-sdk".*oz0 plugin install plugins\/harness-claude/,
    );
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
  assert.equal(config.oidc?.consoleClientId, "oz0-console");
  assert.deepEqual(grantedRoles(config, "alice", []), ["approver"]);
  assert.deepEqual(grantedRoles(config, "someone", ["platform", "staff"]), ["admin", "viewer"]);
  // A placeholder nobody's token hashes to: a digest of a real word ("test", as it once was) is a token
  // anyone can guess, which a copied config would then accept.
  assert.equal(config.tokens?.[0]?.sha256, "0".repeat(64));
  const howTo = /```sh\n([\s\S]*?)```/.exec(section.slice(block.index + block[0].length))?.[1] ?? "";
  assert.match(howTo, /openssl rand -hex 32/);
  const digest = spawnSync("bash", ["-c", `set -e\n${howTo}`], { encoding: "utf8" });
  assert.equal(digest.status, 0, digest.stderr);
  assert.match(digest.stdout, /^[0-9a-f]{64}\n$/, "the digest is what the file takes");
});

void test("the quick start's second terminal runs oz0 dev with the first one's OZ0_HOME", () => {
  // The quick start's OZ0_HOME is a fresh directory: an `oz0 dev` in a terminal without it watched another
  // home, and the quick start's commands went on starting embedded stacks of their own.
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("## Quick start"), readme.indexOf("### `oz0 dev` survives"));
  const dev = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!).find((b) => /^oz0 dev$/m.test(b));
  assert.ok(dev, "the quick start shows how to run oz0 dev");
  assert.match(dev, /^export OZ0_HOME=.*\noz0 dev$/m, "OZ0_HOME is set to the first terminal's before oz0 dev");
  assert.match(section, /the same `OZ0_HOME`/);
});

void test("the README's example plugin is the shipped one, and its addition is a valid agent", () => {
  const readme = readFileSync(path.join(packageDir, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```yaml\n# ([^\s:]+)(.*)\n([\s\S]*?)```/g)];
  const example = path.join(repoRoot, "examples", "plugins", "example");
  for (const file of ["oz0-plugin.yaml", "agents/fixer.yaml"]) {
    const shown = blocks.find((b) => b[1] === file && b[2] === "");
    assert.ok(shown, `the README shows ${file}`);
    // The same values as the file the quick start installs (the README's comments aside).
    assert.deepEqual(parse(shown[3]!), parse(readFileSync(path.join(example, file), "utf8")), file);
  }
  const addition = blocks.find((b) => b[1] === "agents/fixer.yaml" && b[2] === ": an addition");
  assert.ok(addition, "the README shows what an agent may add");
  const fixer = parse(readFileSync(path.join(example, "agents/fixer.yaml"), "utf8")) as { harness: object };
  const added = parse(addition[3]!) as { harness: object };
  validateDocument({
    schema: "agent",
    file: "the README's fixer with its addition",
    value: { ...fixer, harness: { ...fixer.harness, ...added.harness } },
  });
});

void test("the root README's CLI blocks run as written, offline, and the job's patch makes the dates test pass", () => {
  const readme = readFileSync(path.join(repoRoot, "README.md"), "utf8");
  const section = readme.slice(readme.indexOf("The same through the CLI"), readme.indexOf("Commands go to `OZ0_URL`"));
  const [first, then] = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  assert.ok(first && then, "the CLI section has its two sh blocks");
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-root-readme-"));
  const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-root-readme-copy-"));
  // As a new user without a provider key; NODE_TEST_CONTEXT would make the project's own `node --test` report to this runner.
  const env: NodeJS.ProcessEnv = { ...process.env, PATH, OZ0_HOME: home, OZ0_URL: "" };
  for (const name of ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "OZ0_MODEL_SCRIPT", "OZ0_TOKEN", "NODE_TEST_CONTEXT"])
    delete env[name];
  const sh = (script: string, cwd: string) =>
    spawnSync("bash", ["-c", `set -e\n${script}`], { cwd, env, encoding: "utf8" });
  try {
    const ran = sh(first, repoRoot);
    assert.equal(ran.status, 0, `${ran.stdout}\n${ran.stderr}`);
    assert.match(
      ran.stderr,
      /the scripted model answers every model call from examples\/plugins\/example\/demo-script-claude\.json/,
    );
    const job = /^job (job_\w+) succeeded$/m.exec(ran.stdout)?.[1];
    assert.ok(job, ran.stdout);
    assert.match(ran.stdout, new RegExp(`${job}\\s+succeeded\\s+claude-fixer v1`));
    const after = sh(then.replaceAll("JOB", job), scratch);
    assert.equal(after.status, 0, `${after.stdout}\n${after.stderr}`);
    assert.match(after.stdout, /job \S+\s+\d+ calls/);
    // The copy fails its test until the job's patch is applied.
    cpSync(path.join(repoRoot, "examples", "projects", "dates"), path.join(scratch, "dates"), { recursive: true });
    const test = () =>
      spawnSync(process.execPath, ["--test"], { cwd: path.join(scratch, "dates"), env, encoding: "utf8" });
    assert.notEqual(test().status, 0, "the example's test fails before the fix");
    const applied = spawnSync("git", ["apply", path.join("fix", "changes.patch")], { cwd: scratch, encoding: "utf8" });
    assert.equal(applied.status, 0, applied.stderr);
    const fixed = test();
    assert.equal(fixed.status, 0, fixed.stdout + fixed.stderr);
    assert.match(fixed.stdout, /[#ℹ] pass 2\n[#ℹ] fail 0/); // TAP before Node 23, spec after
  } finally {
    rmSync(home, { recursive: true, force: true });
    rmSync(scratch, { recursive: true, force: true });
  }
});

void test("the harness plugins a refusal names are the ones the repository ships", () => {
  for (const [harness, dir] of Object.entries(SHIPPED_HARNESSES)) {
    const manifest = parse(readFileSync(path.join(repoRoot, dir, "oz0-plugin.yaml"), "utf8")) as {
      harnesses?: { name: string }[];
    };
    assert.ok(
      manifest.harnesses?.some((h) => h.name === harness),
      `${dir} declares ${harness}`,
    );
  }
});
