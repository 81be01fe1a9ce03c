// A version's harness hash covers what the harness command runs: a changed
// script in the plugin, a changed lockfile, or a changed package reached
// through node_modules/.bin publishes new versions that name why, and a new
// job runs the new copy; an install without changes publishes nothing.
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, test } from "node:test";
import { repoRoot, startTestStack, type TestStack } from "./support/test-stack.js";

const fakeHarness = pathToFileURL(path.join(repoRoot, "sdk/harness-ts/dist/fake-harness/fake-harness.js")).href;
const work = mkdtempSync(path.join(os.tmpdir(), "oz0-harness-hash-"));
const marks = path.join(work, "marks.txt");
const bin = path.join(work, "node_modules", ".bin");

/** A harness that notes `mark` in the marks file, then is the fake harness. */
const harnessScript = (mark: string, shebang = false): string =>
  `${shebang ? "#!/usr/bin/env node\n" : ""}import { appendFileSync } from "node:fs";\nappendFileSync(${JSON.stringify(marks)}, ${JSON.stringify(`${mark}\n`)});\nawait import(${JSON.stringify(fakeHarness)});\n`;

function makePlugin(options: { name: string; command: string[]; agent: string; dir?: string }): string {
  const dir = options.dir ?? path.join(work, options.name);
  mkdirSync(path.join(dir, "agents"), { recursive: true });
  mkdirSync(path.join(dir, "prompts"), { recursive: true });
  writeFileSync(path.join(dir, "prompts", "p.md"), "Say hello.\n");
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    [
      `name: ${options.name}`,
      "version: 0.1.0",
      "harnesses:",
      "  - name: marked",
      `    command: ${JSON.stringify(options.command)}`,
      "    tools: [read_file]",
      "agents: [agents/a.yaml]",
      "",
    ].join("\n"),
  );
  writeFileSync(
    path.join(dir, "agents", "a.yaml"),
    [
      `name: ${options.agent}`,
      "description: Notes which harness ran.",
      "runtime: harness:marked",
      "model: { primary: anthropic/claude-sonnet-5-5 }",
      "instructions: prompts/p.md",
      "",
    ].join("\n"),
  );
  return dir;
}

const lastMark = (): string => readFileSync(marks, "utf8").trim().split("\n").pop() ?? "";

let t: TestStack;

before(async () => {
  // A package reached through node_modules/.bin on the orchestrator's PATH.
  const pkg = path.join(work, "node_modules", "marked-harness");
  mkdirSync(pkg, { recursive: true });
  mkdirSync(bin, { recursive: true });
  writeFileSync(
    path.join(pkg, "package.json"),
    JSON.stringify({ name: "marked-harness", version: "1.0.0", type: "module", bin: { "marked-harness": "bin.mjs" } }),
  );
  writeFileSync(path.join(pkg, "bin.mjs"), harnessScript("pkg-1", true));
  chmodSync(path.join(pkg, "bin.mjs"), 0o755);
  symlinkSync("../marked-harness/bin.mjs", path.join(bin, "marked-harness"));
  // No isolation: the harnesses note themselves in a file of the test's own, outside the session.
  t = await startTestStack({
    pick: () => ({ text: "hello" }),
    sandboxEnv: { OZ0_ISOLATION: "none" },
    orchestratorEnv: { PATH: `${bin}${path.delimiter}${process.env.PATH ?? ""}` },
  });
});

after(async () => {
  await t?.close();
  rmSync(work, { recursive: true, force: true });
});

async function install(dir: string): Promise<string> {
  const result = await t.cli(["plugin", "install", dir]);
  assert.equal(result.code, 0, result.stderr);
  return result.stdout;
}

async function runAgent(agent: string): Promise<void> {
  const result = await t.cli(["run", agent, "hello"]);
  assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
  assert.match(result.stdout, /succeeded/);
}

void test("a changed harness script in the plugin publishes new versions, and the new job runs it", async () => {
  const dir = makePlugin({ name: "scripted", command: ["node", "harness.mjs"], agent: "scripted-agent" });
  writeFileSync(path.join(dir, "harness.mjs"), harnessScript("script-1"));
  assert.match(await install(dir), /published agent scripted-agent v1: first version/);
  await runAgent("scripted-agent");
  assert.equal(lastMark(), "script-1");

  writeFileSync(path.join(dir, "harness.mjs"), harnessScript("script-2"));
  const changed = await install(dir);
  assert.match(changed, /published agent scripted-agent v2: harness marked's command file harness\.mjs changed\n/);
  await runAgent("scripted-agent");
  assert.equal(lastMark(), "script-2");
  assert.match(await install(dir), /no agent changed/);

  // The dependencies: a new lockfile, then a changed one.
  writeFileSync(
    path.join(dir, "package-lock.json"),
    JSON.stringify({ lockfileVersion: 3, packages: { "node_modules/a": { version: "1.0.0" } } }),
  );
  assert.match(
    await install(dir),
    /published agent scripted-agent v3: plugin scripted's dependencies changed \(package-lock\.json\)\n/,
  );
  assert.match(await install(dir), /no agent changed/);
  writeFileSync(
    path.join(dir, "package-lock.json"),
    JSON.stringify({ lockfileVersion: 3, packages: { "node_modules/a": { version: "1.0.1" } } }),
  );
  assert.match(
    await install(dir),
    /published agent scripted-agent v4: plugin scripted's dependencies changed \(package-lock\.json\)\n/,
  );
  await runAgent("scripted-agent");
  assert.equal(lastMark(), "script-2");

  // Another file of the plugin (one the script might import) is named too; the agent's own files are not the harness's.
  writeFileSync(path.join(dir, "lib.mjs"), "export const x = 1;\n");
  assert.match(await install(dir), /published agent scripted-agent v5: plugin scripted's files changed \(lib\.mjs\)\n/);
  writeFileSync(path.join(dir, "prompts", "p.md"), "Say hello twice.\n");
  assert.match(await install(dir), /published agent scripted-agent v6: instructions changed\n/);
  assert.match(await install(dir), /no agent changed/);
});

void test("a changed package behind node_modules/.bin publishes new versions, and the new job runs it", async () => {
  const dir = makePlugin({ name: "binned", command: ["marked-harness"], agent: "binned-agent" });
  assert.match(await install(dir), /published agent binned-agent v1: first version/);
  await runAgent("binned-agent");
  assert.equal(lastMark(), "pkg-1");
  assert.match(await install(dir), /no agent changed/);

  // A rebuilt package: the program itself changed.
  writeFileSync(path.join(work, "node_modules", "marked-harness", "bin.mjs"), harnessScript("pkg-2", true));
  assert.match(
    await install(dir),
    /published agent binned-agent v2: harness marked's command package marked-harness changed\n/,
  );
  await runAgent("binned-agent");
  assert.equal(lastMark(), "pkg-2");
  // Any file of the package counts, not only the one the link points at.
  writeFileSync(path.join(work, "node_modules", "marked-harness", "helper.mjs"), "export {};\n");
  assert.match(
    await install(dir),
    /published agent binned-agent v3: harness marked's command package marked-harness changed\n/,
  );
  assert.match(await install(dir), /no agent changed/);
});

void test("the same plugin installed again from another folder runs with that folder's dependencies, the first one gone", async () => {
  // Two checkouts of one plugin, each beside a node_modules of its own holding a different build of one package.
  const checkout = (name: string, mark: string): string => {
    const root = path.join(work, name);
    const pkg = path.join(root, "node_modules", "dep");
    mkdirSync(pkg, { recursive: true });
    writeFileSync(path.join(pkg, "package.json"), JSON.stringify({ name: "dep", version: "1.0.0", type: "module" }));
    writeFileSync(path.join(pkg, "index.mjs"), harnessScript(mark));
    const dir = makePlugin({
      name: "moved",
      command: ["node", "harness.mjs"],
      agent: "moved-agent",
      dir: path.join(root, "plugin"),
    });
    writeFileSync(path.join(dir, "harness.mjs"), 'await import("dep/index.mjs");\n');
    return dir;
  };
  const first = checkout("checkout-a", "dep-a");
  await install(first);
  await runAgent("moved-agent");
  assert.equal(lastMark(), "dep-a");

  const second = checkout("checkout-b", "dep-b");
  rmSync(path.dirname(first), { recursive: true, force: true });
  await install(second);
  await runAgent("moved-agent");
  assert.equal(lastMark(), "dep-b", "the installed copy's dependencies are the second checkout's");
});
