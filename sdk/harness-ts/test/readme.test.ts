import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, mkdir } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { create } from "@bufbuild/protobuf";
import { SessionRequestSchema, StopReason } from "@oz0/proto/oz0/harness/v1/harness_pb";
import { startScriptedModel } from "@oz0/harness/testing";
import { checkConformance } from "../examples/check-conformance.js";
import { runSession } from "../examples/run-session.js";

const packageDir = fileURLToPath(new URL("..", import.meta.url));
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
        llm: { anthropicBaseUrl: model.url, token: "oz0st_readme", headers: { "Oz0-Job": "job-readme", "Oz0-Agent": "readme@1" } },
      });
      const log: string[] = [];
      const outcome = await runSession([process.execPath, "--import", tsx, path.join(packageDir, "examples", "echo-harness.ts")], request, (line) => log.push(line));
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
});
