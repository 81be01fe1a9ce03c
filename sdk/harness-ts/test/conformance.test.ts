import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { CONFORMANCE_CASES, runConformance } from "@oz0/harness/testing";
import type { ConformanceReport } from "@oz0/harness/testing";

const run = promisify(execFile);
const here = (relative: string): string => fileURLToPath(new URL(relative, import.meta.url));
const fakeHarness = [process.execPath, here("../bin/oz0-fake-harness.js")];
const pythonHarness = ["python3", here("../fake/python/fake_harness.py")];
const broken = (name: string): string[] => [process.execPath, here(`./fixtures/broken/${name}.mjs`)];
// Generous: on a loaded machine a harness may need a while to exit after its result.
const graceMs = 5000;

function describeFailures(report: ConformanceReport): string {
  return report.cases.filter((c) => c.status === "failed").map((c) => `${c.id}: ${c.message}`).join("\n");
}

void describe("the conformance kit", () => {
  void it("passes oz0-fake-harness on every case, none skipped", async () => {
    const report = await runConformance({ command: fakeHarness, graceMs });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.equal(report.passed, CONFORMANCE_CASES.length);
    assert.deepEqual(report.capabilities, { permissions: true, runtimeTools: true, structuredOutput: true, streamingText: false });
    assert.ok(report.ok);
  });

  void it("passes the standard-library Python fake harness on every case", async () => {
    const report = await runConformance({ command: pythonHarness, graceMs });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.equal(report.passed, CONFORMANCE_CASES.length);
  });

  void it("passes the unbroken base of the broken fixtures, skipping what it does not declare", async () => {
    const report = await runConformance({ command: broken("correct"), graceMs });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.deepEqual(
      report.cases.filter((c) => c.status === "skipped").map((c) => [c.id, c.message]),
      [
        ["runtime-tools", "not declared: capabilities.runtimeTools"],
        ["structured-output", "not declared: capabilities.structuredOutput"],
      ],
    );
  });

  const brokenFixtures: Array<{ fixture: string; caseId: string; message: RegExp }> = [
    { fixture: "no-result", caseId: "handshake", message: /no_result.*exited \(code 0\) without writing a result/ },
    { fixture: "two-results", caseId: "handshake", message: /duplicate_result.*second result/ },
    { fixture: "garbage-line", caseId: "handshake", message: /invalid_json.*not JSON: "DEBUG: starting the agent loop"/ },
    { fixture: "ignores-sigterm", caseId: "cancellation", message: /ignored_sigterm.*still running 5000 ms after SIGTERM/ },
    { fixture: "runs-tool-without-asking", caseId: "permission-allow", message: /without writing a permission_request/ },
    { fixture: "runs-tool-without-asking", caseId: "permission-deny", message: /never asked permission/ },
    { fixture: "skips-headers", caseId: "model-headers", message: /has Oz0-Job null, expected "job-conformance-model-headers"/ },
    { fixture: "uses-provider-key", caseId: "model-headers", message: /sent a provider key from the environment/ },
    { fixture: "escapes-working-dir", caseId: "working-dir", message: /wrote \.\.\/escaped-relative\.txt outside the working directory/ },
    { fixture: "forks-grandchild", caseId: "handshake", message: /still running in its process group after it exited/ },
    { fixture: "ignores-max-turns", caseId: "max-turns", message: /made 5 model calls with max_turns 2/ },
    { fixture: "ignores-replacement-input", caseId: "permission-modified-input", message: /not the answer's replacement/ },
    { fixture: "hides-deny-reason", caseId: "permission-deny", message: /does not contain the denial reason/ },
  ];
  for (const { fixture, caseId, message } of brokenFixtures) {
    void it(`fails ${fixture} on ${caseId}, saying what is wrong`, async () => {
      const report = await runConformance({ command: broken(fixture), graceMs, only: [caseId] });
      const result = report.cases.find((c) => c.id === caseId);
      assert.equal(result?.status, "failed", `${fixture} passed ${caseId}`);
      assert.match(result.message, message);
      assert.equal(report.ok, false);
    });
  }

  void it("keeps a burn-down list: a listed failure is xfail, a listed pass is a stale entry, an unknown id fails", async () => {
    const xfail = await runConformance({ command: broken("skips-headers"), graceMs, only: ["model-headers", "text"], expectedFailures: ["model-headers"] });
    assert.deepEqual(xfail.cases.map((c) => [c.id, c.status]), [["text", "passed"], ["model-headers", "expected_failure"]]);
    assert.equal(xfail.ok, true);
    assert.equal(xfail.failed, 0);

    const stale = await runConformance({ command: broken("correct"), graceMs, only: ["text"], expectedFailures: ["text", "no-such-case"] });
    assert.equal(stale.ok, false);
    assert.deepEqual(stale.cases.map((c) => [c.id, c.status]), [["no-such-case", "failed"], ["text", "failed"]]);
    assert.match(stale.cases[1]?.message ?? "", /passes now: remove it/);
    assert.match(stale.cases[0]?.message ?? "", /unknown case "no-such-case"/);
  });

  void it("has a CLI that prints one line per case and exactly `N passed, N failed`, exiting 0 only when all pass", async () => {
    const cli = here("../bin/oz0-harness-conformance.js");
    const good = await run(process.execPath, [cli, "--only", "handshake,text", "--", ...fakeHarness]);
    const lines = good.stdout.trim().split("\n");
    assert.deepEqual(lines.map((l) => l.slice(0, 5)), ["PASS ", "PASS ", "2 pas"]);
    assert.equal(lines.at(-1), "2 passed, 0 failed");

    const bad = await run(process.execPath, [cli, "--only", "handshake", "--", ...broken("no-result")]).then(
      () => assert.fail("exit status 0 for a failing harness"),
      (error: { code: number; stdout: string }) => error,
    );
    assert.equal(bad.code, 1);
    assert.match(bad.stdout, /^FAIL {2}handshake: .*without writing a result/m);
    assert.equal(bad.stdout.trim().split("\n").at(-1), "0 passed, 1 failed");

    const json = await run(process.execPath, [cli, "--json", "--only", "text", "--", ...fakeHarness]);
    const report = JSON.parse(json.stdout) as ConformanceReport;
    assert.equal(report.passed, 1);
    assert.equal(report.cases[0]?.id, "text");

    const usage = await run(process.execPath, [cli, "--json"]).catch((error: { code: number; stderr: string }) => error);
    assert.ok("code" in usage && usage.code === 2);
  });
});
