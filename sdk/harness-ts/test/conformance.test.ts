import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { CONFORMANCE_CASES, CONFORMANCE_REPORT_VERSION, runConformance } from "@oz0/harness/testing";
import type { ConformanceReport } from "@oz0/harness/testing";
import { CONTAINMENT_MECHANISMS, containmentUnavailable } from "@oz0/harness/host";

const run = promisify(execFile);
const here = (relative: string): string => fileURLToPath(new URL(relative, import.meta.url));
const packageDir = here("..");
const cli = here("../bin/oz0-harness-conformance.js");
const fakeHarness = [process.execPath, here("../bin/oz0-fake-harness.js")];
const pythonHarness = ["python3", here("../fake/python/fake_harness.py")];
/**
 * A number of six digits unique to this run, which the fixtures put in their
 * escaped children's command lines (`sleep N`, `setInterval(..., N)`): a run
 * killed part-way leaves its escapees behind, and the next run must not find them.
 */
const ESCAPEE = String(100_000 + ((process.pid * 7919 + Date.now()) % 900_000));
const broken = (name: string): string[] => [process.execPath, here(`./fixtures/broken/${name}.mjs`), ESCAPEE];
// Generous: on a loaded machine a harness may need a while to exit after its result.
const graceMs = 5000;
/** What the clean-environment fixture's escaped child runs: only a cgroup or a subreaper finds it. */
const CLEAN_ESCAPEE = `setInterval(() => {}, ${ESCAPEE})`;
const SETSID_ESCAPEE = `sleep ${ESCAPEE}`;

/** The mechanism the kit takes in this process (the first that works). */
const kitMechanism = CONTAINMENT_MECHANISMS.find((mechanism) => containmentUnavailable(mechanism) === undefined);

function describeFailures(report: ConformanceReport): string {
  return report.cases
    .filter((c) => c.status !== "passed")
    .map((c) => `${c.id} (${c.status}): ${c.message}`)
    .join("\n");
}

/** Live processes whose command line contains `text`. */
function processesRunning(text: string): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ").includes(text);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** Every case ran on both routes, but those whose checks use no model answer, which ran on the first. */
function assertBothRoutes(report: ConformanceReport): void {
  assert.deepEqual(report.routes, ["anthropic", "openai"]);
  assert.deepEqual(report.untestedRoutes, []);
  for (const result of report.cases) {
    const one = CONFORMANCE_CASES.find((c) => c.id === result.id)?.anyRoute === true;
    assert.deepEqual(result.routes, one ? ["anthropic"] : ["anthropic", "openai"], result.id);
  }
}

void describe("the conformance kit", () => {
  void it("passes oz0-fake-harness on every case on both routes, none not applicable, no warning", async () => {
    const report = await runConformance({ command: fakeHarness, graceMs, route: "both" });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.equal(report.passed, CONFORMANCE_CASES.length, describeFailures(report));
    assert.deepEqual(report.capabilities, {
      permissions: true,
      runtimeTools: true,
      structuredOutput: true,
      streamingText: false,
    });
    assert.equal(report.toolProfile, "oz0");
    assertBothRoutes(report);
    assert.ok(report.ok);
  });

  void it("passes the standard-library Python fake harness on every case on both routes", async () => {
    const report = await runConformance({ command: pythonHarness, graceMs, route: "both" });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.equal(report.passed, CONFORMANCE_CASES.length, describeFailures(report));
    assertBothRoutes(report);
  });

  void it("by default (--route auto) tests every route the harness calls, and says why it left one out", async () => {
    const auto = await runConformance({ command: fakeHarness, graceMs, only: ["text"] });
    assert.deepEqual(
      [auto.routes, auto.cases[0]?.routes],
      [
        ["anthropic", "openai"],
        ["anthropic", "openai"],
      ],
    );

    // The base of the broken fixtures speaks only the Anthropic route: it passes there, and the report says so.
    const anthropicOnly = await run(process.execPath, [cli, "--only", "text", "--", ...broken("correct")]);
    assert.deepEqual(anthropicOnly.stdout.trim().split("\n").slice(1), [
      "not tested on the OpenAI route: for a session of openai/gpt-conformance the harness called POST /anthropic/v1/messages, not the OpenAI route",
      "1 passed, 0 failed",
    ]);
  });

  void it("fails a harness on a route it is asked for but does not speak, naming the route the request's model asks for", async () => {
    const report = await runConformance({
      command: broken("correct"),
      graceMs,
      only: ["text", "protocol-version"],
      route: "both",
    });
    assert.deepEqual(
      report.cases.map((c) => [c.id, c.status, c.routes]),
      [
        ["protocol-version", "passed", ["anthropic"]],
        ["text", "failed", ["anthropic", "openai"]],
      ],
    );
    assert.equal(
      report.cases[1]?.message,
      "the OpenAI route: the session's model is openai/gpt-conformance, so its calls go to the OpenAI route, POST {llm.openai_base_url}/chat/completions (or /responses); the harness called POST /anthropic/v1/messages (TextEvent, SessionResult.text)",
    );
  });

  void it("fails a harness that calls {openai_base_url}/v1/chat/completions, which the LLM proxy does not serve, on the OpenAI route only", async () => {
    const report = await runConformance({ command: broken("doubles-openai-path"), graceMs, only: ["text"] });
    assert.deepEqual(
      report.routes,
      ["anthropic", "openai"],
      "a call to /openai/… counts as speaking the route, so auto tests it",
    );
    assert.equal(report.cases[0]?.status, "failed");
    assert.match(
      report.cases[0]?.message ?? "",
      /^the OpenAI route: .* the harness called POST \/openai\/v1\/v1\/chat\/completions, a path the LLM proxy does not serve \(404\)/,
    );
    assert.doesNotMatch(report.cases[0]?.message ?? "", /the Anthropic route:/);
  });

  void it("passes the unbroken base of the broken fixtures; what it does not declare is not applicable", async () => {
    const report = await runConformance({ command: broken("correct"), graceMs });
    assert.equal(report.failed, 0, describeFailures(report));
    assert.equal(report.warnings, 0, describeFailures(report));
    assert.deepEqual(
      report.cases.filter((c) => c.status === "not_applicable").map((c) => [c.id, c.message]),
      [["structured-output", "not declared: capabilities.structuredOutput"]],
    );
  });

  void it("reports the capability cases of a harness that declares nothing as not applicable, not passed", async () => {
    const report = await runConformance({ command: broken("declares-nothing"), graceMs });
    assert.equal(report.failed, 0, describeFailures(report));
    const notApplicable = report.cases.filter((c) => c.status === "not_applicable");
    assert.deepEqual(
      notApplicable.map((c) => c.id),
      [
        "permission-allow",
        "permission-deny",
        "permission-modified-input",
        "permission-outcome",
        "unique-ids",
        "runtime-tools",
        "runtime-tool-permission",
        "structured-output",
      ],
    );
    assert.match(
      notApplicable.find((c) => c.id === "runtime-tool-permission")?.message ?? "",
      /^not declared: capabilities\.permissions, capabilities\.runtimeTools$/,
    );
    assert.equal(report.notApplicable, 8);
    assert.equal(report.passed, CONFORMANCE_CASES.length - 8);
    assert.deepEqual(report.capabilities, {
      permissions: false,
      runtimeTools: false,
      structuredOutput: false,
      streamingText: false,
    });
  });

  // The original fixtures, each checked on the case it was made for.
  const brokenFixtures: Array<{ fixture: string; caseId: string; message: RegExp }> = [
    { fixture: "no-result", caseId: "handshake", message: /no_result.*exited \(code 0\) without writing a result/ },
    { fixture: "two-results", caseId: "handshake", message: /duplicate_result.*second result/ },
    {
      fixture: "garbage-line",
      caseId: "handshake",
      message: /invalid_json.*not JSON: "DEBUG: starting the agent loop"/,
    },
    {
      fixture: "ignores-sigterm",
      caseId: "cancellation",
      message: /ignored_sigterm.*still running 5000 ms after SIGTERM/,
    },
    {
      fixture: "runs-tool-without-asking",
      caseId: "permission-allow",
      message: /without writing a permission_request/,
    },
    { fixture: "runs-tool-without-asking", caseId: "permission-deny", message: /never asked permission/ },
    {
      fixture: "skips-headers",
      caseId: "model-headers",
      message: /has Oz0-Job null, expected "job-conformance-model-headers"/,
    },
    {
      fixture: "uses-provider-key",
      caseId: "model-headers",
      message: /sends an x-api-key that is not the session token.*\(rule 4\)$/,
    },
    {
      fixture: "escapes-working-dir",
      caseId: "working-dir",
      message: /wrote \.\.\/escaped-relative\.txt outside the working directory/,
    },
    {
      fixture: "forks-grandchild",
      caseId: "processes",
      message: /\(sleep 1000\)\) were still running in its process group 1 s after the harness exited.*\(rule 5\)$/,
    },
    { fixture: "ignores-max-turns", caseId: "max-turns", message: /made 5 model calls with max_turns 2/ },
    {
      fixture: "ignores-replacement-input",
      caseId: "permission-modified-input",
      message: /not the answer's replacement/,
    },
    { fixture: "hides-deny-reason", caseId: "permission-deny", message: /does not contain the denial reason/ },
    {
      fixture: "asks-without-input",
      caseId: "permission-allow",
      message:
        /the permission_request for the write_file call carries the input \{\}, not the call's \{"path":"allowed\.txt","content":"allowed content"\}/,
    },
    {
      fixture: "asks-twice-per-call",
      caseId: "unique-ids",
      message:
        /the session failed \(duplicate_request_id\): the harness reused "[^"]+" in permission request "p2": it is the call id of permission request "p1"/,
    },
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

  // The fixtures of the later cases: each breaks one rule and fails exactly its case, on a whole run, naming the rule.
  const exactFixtures: Array<{ fixture: string; caseId: string; status: "failed" | "warning"; message: RegExp }> = [
    {
      fixture: "accepts-any-version",
      caseId: "protocol-version",
      status: "failed",
      message: /accepted a PROTOCOL_VERSION_2 request \(its result is STOP_REASON_COMPLETED\).*\(rule 1\)$/,
    },
    {
      fixture: "exits-on-sigterm-without-result",
      caseId: "cancelled-result",
      status: "failed",
      message: /exited \(code 0\) after SIGTERM without writing a result.*\(rule 5\)$/,
    },
    {
      fixture: "ignores-answer-outcome",
      caseId: "permission-outcome",
      status: "failed",
      message:
        /the tool ran \(timed-out\.txt exists\) although the answer's outcome was OUTCOME_TIMED_OUT.*\(rule 6, rule 7\)$/,
    },
    {
      fixture: "ids-from-content",
      caseId: "unique-ids",
      status: "failed",
      message:
        /the session failed \(duplicate_request_id\): the harness reused the permission request id .*\(PermissionRequest\.id, PermissionRequest\.call_id\)$/,
    },
    {
      fixture: "no-tool-events",
      caseId: "tool-events",
      status: "failed",
      message: /wrote no tool_call event.*\(ToolCall, ToolResult\)$/,
    },
    {
      fixture: "escapes-with-setsid",
      caseId: "processes",
      status: "failed",
      message: new RegExp(
        `process \\d+ \\(${SETSID_ESCAPEE}\\) left the session's process group \\(setsid.*\\(rule 5\\)$`,
      ),
    },
    ...(kitMechanism !== "environment"
      ? [
          {
            fixture: "escapes-with-clean-environment",
            caseId: "processes",
            status: "failed" as const,
            message: new RegExp(
              `process \\d+ \\(.*setInterval\\(\\(\\) => \\{\\}, ${ESCAPEE}\\)\\) left the session's process group \\(setsid.*\\(rule 5\\)$`,
            ),
          },
        ]
      : []),
    {
      fixture: "follows-symlinks-out",
      caseId: "working-dir",
      status: "failed",
      message:
        /the harness wrote up-link\/escaped-through-link\.txt, where up-link is a symlink in the working directory to the folder above it; compare real paths .*\(SessionRequest\.working_dir\)$/,
    },
    {
      fixture: "refuses-outside-unasked",
      caseId: "working-dir",
      status: "failed",
      message:
        /reported a result for tool call "[^"]+" without a permission_request for it \(it refused the call itself\?\); the orchestrator stops the job .*\(SessionRequest\.working_dir\)$/,
    },
    {
      fixture: "runtime-tools-without-asking",
      caseId: "runtime-tool-permission",
      status: "failed",
      message: /relayed the runtime tool call without a permission_request first.*\(rule 6\)$/,
    },
    {
      fixture: "no-usage",
      caseId: "usage",
      status: "warning",
      message: /wrote no usage event.*\(Usage, SessionResult\.usage and turns\)$/,
    },
  ];
  for (const { fixture, caseId, status, message } of exactFixtures) {
    void it(`fails ${fixture} on ${caseId} and nothing else, naming the rule`, async () => {
      const report = await runConformance({ command: broken(fixture), graceMs });
      const notPassed = report.cases.filter((c) => c.status !== "passed" && c.status !== "not_applicable");
      assert.deepEqual(
        notPassed.map((c) => [c.id, c.status]),
        [[caseId, status]],
        describeFailures(report),
      );
      assert.match(notPassed[0]?.message ?? "", message);
      assert.equal(report.ok, status === "warning", "a recommended case only warns; a required one fails the run");
      if (fixture === "escapes-with-setsid") {
        // Its escaped child holds stdout open: the kit neither waits for it (the test's timeout would end a hang) nor leaves it running.
        assert.deepEqual(processesRunning(SETSID_ESCAPEE), []);
      }
      if (fixture === "escapes-with-clean-environment") assert.deepEqual(processesRunning(CLEAN_ESCAPEE), []);
    });
  }

  void it("drives tools of other names and shapes through a tool profile; without it the tool cases are not applicable", async () => {
    const profile = here("./fixtures/tool-profile.json");
    const cliRun = await run(process.execPath, [
      cli,
      "--json",
      "--grace-ms",
      String(graceMs),
      "--tool-profile",
      profile,
      "--",
      ...broken("renamed-tools"),
    ]);
    const withProfile = JSON.parse(cliRun.stdout) as ConformanceReport;
    assert.equal(withProfile.failed, 0, describeFailures(withProfile));
    assert.equal(withProfile.toolProfile, "renamed-tools");
    assert.deepEqual(
      withProfile.cases.filter((c) => c.status !== "passed").map((c) => c.id),
      ["structured-output"],
    );

    const without = await runConformance({
      command: broken("renamed-tools"),
      graceMs,
      only: ["text", "permission-allow", "working-dir"],
    });
    assert.deepEqual(
      without.cases.map((c) => [c.id, c.status]),
      [
        ["text", "passed"],
        ["permission-allow", "not_applicable"],
        ["working-dir", "not_applicable"],
      ],
    );
    assert.match(
      without.cases[1]?.message ?? "",
      /the harness offers view_file, create_file; the kit drives read_file\/write_file or Read\/Write \(map yours with --tool-profile\)/,
    );
    assert.deepEqual(without.offeredTools, ["view_file", "create_file"]);
  });

  void it("keeps a burn-down list: a listed failure is xfail, a listed pass is a stale entry, an unknown id fails", async () => {
    const xfail = await runConformance({
      command: broken("skips-headers"),
      graceMs,
      only: ["model-headers", "text"],
      expectedFailures: ["model-headers"],
    });
    assert.deepEqual(
      xfail.cases.map((c) => [c.id, c.status]),
      [
        ["text", "passed"],
        ["model-headers", "expected_failure"],
      ],
    );
    assert.equal(xfail.ok, true);
    assert.equal(xfail.failed, 0);

    const stale = await runConformance({
      command: broken("correct"),
      graceMs,
      only: ["text"],
      expectedFailures: ["text", "no-such-case"],
    });
    assert.equal(stale.ok, false);
    assert.deepEqual(
      stale.cases.map((c) => [c.id, c.status]),
      [
        ["no-such-case", "failed"],
        ["text", "failed"],
      ],
    );
    assert.match(stale.cases[1]?.message ?? "", /passes now: remove it/);
    assert.match(
      stale.cases[0]?.message ?? "",
      /unknown case "no-such-case"; known cases: handshake, protocol-version, /,
    );
  });

  void it("fails --only with an unknown case, naming the known ones, from code and from the CLI", async () => {
    const report = await runConformance({ command: broken("correct"), graceMs, only: ["bogus"] });
    assert.equal(report.ok, false);
    assert.deepEqual(
      report.cases.map((c) => [c.id, c.status]),
      [["bogus", "failed"]],
    );
    assert.match(
      report.cases[0]?.message ?? "",
      new RegExp(`known cases: ${CONFORMANCE_CASES.map((c) => c.id).join(", ")}$`),
    );

    const bad = await run(process.execPath, [cli, "--only", "bogus", "--", ...broken("correct")]).then(
      () => assert.fail("exit status 0 for --only bogus"),
      (error: { code: number; stdout: string; stderr: string }) => error,
    );
    assert.equal(bad.code, 2);
    assert.equal(bad.stdout, "");
    assert.match(bad.stderr, /--only names unknown case\(s\) bogus; known cases: handshake, protocol-version, text, /);
  });

  void it("has a CLI that prints one line per case and exactly `N passed, N failed`, exiting 0 only when all pass", async () => {
    const good = await run(process.execPath, [cli, "--only", "handshake,text", "--", ...fakeHarness]);
    const lines = good.stdout.trim().split("\n");
    assert.deepEqual(
      lines.map((l) => l.slice(0, 5)),
      ["PASS ", "PASS ", "2 pas"],
    );
    assert.equal(lines.at(-1), "2 passed, 0 failed");

    const bad = await run(process.execPath, [cli, "--only", "handshake", "--", ...broken("no-result")]).then(
      () => assert.fail("exit status 0 for a failing harness"),
      (error: { code: number; stdout: string }) => error,
    );
    assert.equal(bad.code, 1);
    assert.match(bad.stdout, /^FAIL {2}handshake: .*without writing a result/m);
    assert.equal(bad.stdout.trim().split("\n").at(-1), "0 passed, 1 failed");

    const notApplicable = await run(process.execPath, [
      cli,
      "--route",
      "anthropic",
      "--only",
      "text,permission-allow",
      "--",
      ...broken("declares-nothing"),
    ]);
    assert.deepEqual(notApplicable.stdout.trim().split("\n").slice(1), [
      "N/A   permission-allow: asks before a tool call and runs it when allowed — not declared: capabilities.permissions",
      "warning: the permission cases were not run: the harness declared no permissions capability in started; so its plugin manifest must not say permissions: true (on the stack, a harness whose manifest says so and whose started does not fails each job at its start), and without it the orchestrator refuses agents on it that set harness.requires_approval, hooks or approvals",
      "1 not applicable",
      "1 passed, 0 failed",
    ]);

    const usage = await run(process.execPath, [cli, "--json"]).catch(
      (error: { code: number; stderr: string }) => error,
    );
    assert.ok("code" in usage && usage.code === 2);
    assert.match(usage.stderr, /no harness command after --/);
  });

  // The issue's harness: a child in a session of its own holding stdout and stderr, the harness gone. The CLI ends it, says so and exits.
  for (const mechanism of CONTAINMENT_MECHANISMS) {
    // The best-effort search finds a process only by the environment it inherited: its fixture keeps it.
    const [fixture, escapee] =
      mechanism === "environment"
        ? ["escapes-with-setsid", SETSID_ESCAPEE]
        : ["escapes-with-clean-environment", CLEAN_ESCAPEE];
    void it(
      `with containment by ${mechanism}, the CLI fails ${fixture} on processes, kills what it left and exits`,
      { skip: containmentUnavailable(mechanism) ?? false },
      async () => {
        const failed = await run(
          process.execPath,
          [cli, "--only", "processes", "--grace-ms", String(graceMs), "--", ...broken(fixture)],
          { env: { ...process.env, OZ0_CONTAINMENT: mechanism } },
        ).then(
          () => assert.fail("exit status 0 for a harness that leaves a process behind"),
          (error: { code: number; stdout: string; stderr: string }) => error,
        );
        assert.equal(failed.code, 1, failed.stderr);
        assert.match(failed.stdout, /^FAIL {2}processes: .*left the session's process group \(setsid.*\(rule 5\)$/m);
        assert.equal(failed.stdout.trim().split("\n").at(-1), "0 passed, 1 failed");
        assert.deepEqual(processesRunning(escapee), []);
      },
    );
  }

  void it("resolves a relative harness path against the caller's directory, as plugin manifests are", async () => {
    const relative = await run(
      process.execPath,
      [cli, "--only", "handshake", "--", "node", "test/fixtures/broken/correct.mjs"],
      { cwd: packageDir },
    );
    assert.equal(relative.stdout.trim().split("\n").at(-1), "1 passed, 0 failed");
    const json = await run(
      process.execPath,
      [cli, "--json", "--only", "handshake", "--", "node", "fixtures/broken/correct.mjs"],
      { cwd: here(".") },
    );
    assert.deepEqual((JSON.parse(json.stdout) as ConformanceReport).command, [
      process.execPath,
      here("./fixtures/broken/correct.mjs"),
    ]);
  });

  void it("runs from a built checkout for a harness in another language, in a folder with no node_modules", async () => {
    // The guide's way for a Python or Go author: nothing installed in the plugin's folder (whose files count in its
    // version), the kit run by its path in the checkout.
    const folder = mkdtempSync(path.join(tmpdir(), "oz0-kit-from-checkout-"));
    try {
      copyFileSync(pythonHarness[1]!, path.join(folder, "harness.py"));
      const { stdout } = await run(process.execPath, [cli, "--only", "handshake,text", "--", "python3", "harness.py"], {
        cwd: folder,
      });
      assert.equal(stdout.trim().split("\n").at(-1), "2 passed, 0 failed", stdout);
      assert.deepEqual(readdirSync(folder), ["harness.py"], "the kit left nothing in the author's folder");
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  void it("refuses a --route it does not know, naming the ones it does", async () => {
    const bad = await run(process.execPath, [cli, "--route", "gemini", "--", ...broken("correct")]).catch(
      (error: { code: number; stderr: string }) => error,
    );
    assert.ok("code" in bad && bad.code === 2);
    assert.match(bad.stderr, /--route needs one of auto, anthropic, openai, both, got "gemini"/);
  });

  void it("documents every option in --help, --case-timeout-ms included", async () => {
    const { stdout } = await run(process.execPath, [cli, "--help"]);
    const source = await readFile(path.join(packageDir, "src", "testing", "conformance", "conformance-cli.ts"), "utf8");
    const parsed = [...source.matchAll(/flag === "(--[a-z-]+)"/g)].map((m) => m[1]);
    assert.ok(parsed.length >= 12, `found only ${parsed.length} options in the parser`);
    for (const flag of [...parsed, "--case-timeout-ms", "--tool-profile", "-h"])
      assert.match(stdout, new RegExp(`^ {2}${flag}\\b|\\(also ${flag}\\)`, "m"), `--help does not document ${flag}`);
    for (const c of CONFORMANCE_CASES) assert.ok(stdout.includes(c.id), `--help does not name the case ${c.id}`);
    const short = await run(process.execPath, [cli, "-h"]);
    assert.equal(short.stdout, stdout);
  });

  void it("prints a versioned JSON report and writes transcripts", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "oz0-conformance-transcripts-"));
    try {
      const json = await run(process.execPath, [
        cli,
        "--json",
        "--transcripts",
        dir,
        "--only",
        "text,permission-allow",
        "--",
        ...fakeHarness,
      ]);
      const report = JSON.parse(json.stdout) as ConformanceReport;
      assert.equal(report.version, CONFORMANCE_REPORT_VERSION);
      assert.equal(report.version, 1);
      assert.equal(report.ok, true);
      assert.deepEqual(report.harness, { name: "oz0-fake-harness", version: "0.1.0" });
      assert.deepEqual(Object.keys(report).sort(), [
        "capabilities",
        "cases",
        "command",
        "expectedFailures",
        "failed",
        "harness",
        "notApplicable",
        "notices",
        "offeredTools",
        "ok",
        "passed",
        "routes",
        "toolProfile",
        "untestedRoutes",
        "version",
        "warnings",
      ]);
      assert.deepEqual(Object.keys(report.cases[0] ?? {}).sort(), [
        "durationMs",
        "id",
        "level",
        "message",
        "routes",
        "rule",
        "status",
        "title",
        "transcripts",
      ]);
      assert.deepEqual(
        report.cases.map((c) => [c.id, c.status, c.level, c.rule]),
        [
          ["text", "passed", "required", "TextEvent, SessionResult.text"],
          ["permission-allow", "passed", "required", "rule 6"],
        ],
      );
      const transcript = await readFile(path.join(dir, "permission-allow.txt"), "utf8");
      assert.match(
        transcript,
        /^# scenario permission-allow \(anthropic route\)\nstdin {2}\{"protocolVersion":"PROTOCOL_VERSION_1",.*"model":\{"primary":"anthropic\/claude-conformance"\}/,
      );
      assert.match(
        transcript,
        /^# scenario permission-allow \(openai route\)\nstdin {2}\{.*"model":\{"primary":"openai\/gpt-conformance"\}/m,
      );
      assert.match(transcript, /^stdout \{"permissionRequest":\{"id":"perm-1",/m);
      assert.match(
        transcript,
        /^stdin {2}\{"permissionAnswer":\{"id":"perm-1","allow":true,"outcome":"OUTCOME_ANSWERED"\}\}$/m,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
