import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { CONFORMANCE_CASES, startScriptedModel } from "@oz0/harness/testing";
import { checkConformance } from "../examples/check-conformance.js";
import { runSession } from "../examples/run-session.js";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
const repoRoot = path.resolve(packageDir, "..", "..");
const tsx = import.meta.resolve("tsx");

void describe("README", () => {
  void it("shows exactly the example files, every one of them", async () => {
    const readme = await readFile(path.join(packageDir, "README.md"), "utf8");
    const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1]);
    const examples = (await readdir(path.join(packageDir, "examples"))).filter((f) => f.endsWith(".ts")).sort();
    const contents = await Promise.all(examples.map((f) => readFile(path.join(packageDir, "examples", f), "utf8")));
    assert.equal(blocks.length, examples.length, "one ts block per example file");
    for (const [i, content] of contents.entries()) {
      assert.ok(blocks.includes(content), `README does not show examples/${examples[i]} as it is`);
    }
  });

  void it("runs the quick-start harness through the host example, permission answered", async () => {
    const model = await startScriptedModel({ turns: [{ text: "Hello from the model." }] });
    const dir = await mkdtemp(path.join(tmpdir(), "oz0-readme-"));
    try {
      await mkdir(path.join(dir, "work"));
      await mkdir(path.join(dir, "state"));
      const request = create(SessionRequestSchema, {
        protocolVersion: 1,
        jobId: "job-readme",
        agent: { name: "readme", version: 1 },
        model: { primary: "anthropic/scripted" },
        input: "Say hello.",
        permissions: true,
        workingDir: path.join(dir, "work"),
        stateDir: path.join(dir, "state"),
        llm: {
          anthropicBaseUrl: model.url,
          token: "oz0st_readme",
          headers: { "Oz0-Job": "job-readme", "Oz0-Agent": "readme@1" },
        },
      });
      const log: string[] = [];
      const outcome = await runSession(
        [process.execPath, "--import", tsx, path.join(packageDir, "examples", "echo-harness.ts")],
        request,
        (line) => log.push(line),
      );
      assert.equal(outcome.status, "completed", `${outcome.error?.message} ${outcome.stderrTail}`);
      assert.equal(outcome.result?.stopReason, StopReason.COMPLETED);
      assert.equal(outcome.result?.text, "Hello from the model.");
      assert.deepEqual(log, ["text: Hello from the model.", "permission asked for save_note"]);
      assert.equal(model.requests[0]?.headers["oz0-job"], "job-readme");
      assert.equal(model.requests[0]?.headers["x-api-key"], "oz0st_readme");
    } finally {
      await model.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  void it("runs the conformance example against the Python fake harness", async () => {
    const logged: string[] = [];
    const original = console.log;
    console.log = (line: string) => logged.push(line);
    try {
      const ok = await checkConformance(["python3", path.join(packageDir, "fake", "python", "fake_harness.py")]);
      assert.equal(ok, true, logged.join("\n"));
    } finally {
      console.log = original;
    }
    assert.match(logged.at(-1) ?? "", /^\d+ passed, 0 failed$/);
  });
  void it("maps every rule of harness.proto and every conformance case in its table", async () => {
    const readme = await readFile(path.join(packageDir, "README.md"), "utf8");
    const section = readme.slice(
      readme.indexOf("### Each rule and the case that checks it"),
      readme.indexOf("### The session's environment"),
    );
    const rows = section
      .split("\n")
      .filter((line) => line.startsWith("| ") && !line.startsWith("| rule |") && !line.startsWith("| ---"))
      .map((line) => line.split(" | ").map((cell) => cell.replace(/^\| ?| ?\|$/g, "").trim()));
    const proto = await readFile(path.join(repoRoot, "proto", "oz0", "harness", "v1", "harness.proto"), "utf8");
    const protoRules = [...proto.matchAll(/^\/\/ {1,2}(\d+)\. /gm)].map((m) => Number(m[1]));
    const readmeRules = [...readme.matchAll(/^(\d+)\. /gm)].map((m) => Number(m[1]));
    assert.ok(protoRules.length >= 7, "harness.proto's numbered rules were not found");
    for (const n of new Set([...protoRules, ...readmeRules])) {
      assert.ok(
        rows.some(([rule]) => rule?.split(", ").includes(`rule ${n}`)),
        `rule ${n} has no row in the README's table`,
      );
    }
    for (const c of CONFORMANCE_CASES) {
      const mine = rows.filter(([, , cases]) => cases?.includes(`\`${c.id}\``));
      assert.ok(mine.length > 0, `case ${c.id} is in no row of the README's table`);
      const rules = [...new Set(mine.flatMap(([rule]) => rule?.replaceAll("`", "").split(", ") ?? []))].sort();
      assert.deepEqual(
        rules,
        c.rule.split(", ").sort(),
        `the README's rows of ${c.id} name the rules ${rules.join(", ")}, the kit ${c.rule}`,
      );
      for (const row of mine)
        assert.equal(row[3], c.level, `the README gives ${c.id} the level ${row[3]}, the kit ${c.level}`);
    }
  });

  void it("documents every option of the conformance CLI", async () => {
    const readme = await readFile(path.join(packageDir, "README.md"), "utf8");
    const { stdout } = await promisify(execFile)(process.execPath, [
      path.join(packageDir, "bin", "oz0-harness-conformance.js"),
      "--help",
    ]);
    const flags = [...stdout.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]);
    assert.ok(flags.includes("--case-timeout-ms"));
    for (const flag of flags)
      assert.match(readme, new RegExp(`^\\| \`${flag}[ \`,]`, "m"), `the README's option table lacks ${flag}`);
  });
});
