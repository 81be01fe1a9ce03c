// The Go example harness (examples/harness-go, standard library only) builds
// with `go build` and passes every case of the conformance kit, on both model
// routes.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { CONFORMANCE_CASES, runConformance } from "@oz0/harness/testing";

const run = promisify(execFile);
const example = fileURLToPath(new URL("../../../examples/harness-go", import.meta.url));

void describe("the Go example harness", () => {
  void it("is gofmt-clean, builds with go build, and passes every conformance case on both routes", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "oz0-harness-go-"));
    try {
      const env = { ...process.env, GOTOOLCHAIN: "local", GOFLAGS: "-mod=mod" };
      const fmt = await run("gofmt", ["-l", "."], { cwd: example, env });
      assert.equal(fmt.stdout, "", `gofmt would change: ${fmt.stdout}`);
      const binary = path.join(dir, "harness");
      await run("go", ["build", "-o", binary, "."], { cwd: example, env });
      const report = await runConformance({ command: [binary], graceMs: 5000, route: "both" });
      const notPassed = report.cases
        .filter((c) => c.status !== "passed")
        .map((c) => `${c.id} (${c.status}): ${c.message}`);
      assert.deepEqual(notPassed, []);
      assert.equal(report.passed, CONFORMANCE_CASES.length);
      assert.deepEqual(report.harness, { name: "oz0-example-harness-go", version: "0.1.0" });
      assert.deepEqual(report.routes, ["anthropic", "openai"]);
      assert.ok(
        report.cases.filter((c) => c.routes.length === 2).length >= CONFORMANCE_CASES.length - 2,
        "every case that uses the model ran on both routes",
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
