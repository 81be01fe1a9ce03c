// What the kit says when a case fails: enough to fix the harness without
// running it again by hand. Each fixture is the minimal agent with one
// switch on (test/fixtures/broken), as a third-party author's harness broke.
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { runConformance } from "@oz0/harness/testing";
import type { ConformanceReport } from "@oz0/harness/testing";

const here = (relative: string): string => fileURLToPath(new URL(relative, import.meta.url));
const broken = (name: string): string[] => [process.execPath, here(`./fixtures/broken/${name}.mjs`)];
const graceMs = 5000;

function messages(report: ConformanceReport): Record<string, [string, string]> {
  return Object.fromEntries(report.cases.map((c) => [c.id, [c.status, c.message]]));
}

void describe("the conformance kit's messages", () => {
  void it("show the last 4 KiB of stderr, from a whole line, saying what was cut", async () => {
    const report = await runConformance({ command: broken("panics"), graceMs, only: ["handshake"] });
    const message = report.cases[0]?.message ?? "";
    assert.equal(report.cases[0]?.status, "failed");
    assert.match(
      message,
      /^the session failed \(no_result\): the harness exited \(code 2\) without writing a result \(rule 1, rule 3\)\n {2}its stderr ended with/,
    );
    // The panic line, 25 lines above the end, and the last line.
    assert.match(message, /^ {4}panic: runtime error: index out of range \[3\] with length 3$/m);
    assert.match(message, /\n {4}exit status 2$/);
    const [, shown, total] =
      /its stderr ended with \(the last ([\d,]+) of ([\d,]+) bytes; the lines before are not shown\):\n/.exec(
        message,
      ) ?? ["", "", ""];
    assert.ok(shown !== "" && total !== "", message.slice(0, 400));
    const shownBytes = Number(shown.replaceAll(",", ""));
    assert.ok(shownBytes <= 4096 && shownBytes > 3000, `shown ${shownBytes}`);
    assert.ok(Number(total.replaceAll(",", "")) > 4096, total);
    // Whole lines only: the first line shown is a complete log line.
    const block = message.slice(message.indexOf("bytes; the lines before are not shown):\n") + 40);
    assert.match(block.split("\n")[0] ?? "", /^ {4}log: step \d+ of the agent loop went well$/);
  });

  void it("fail every case that completes when the harness exits non-zero after its result, as the stack does", async () => {
    const report = await runConformance({
      command: broken("exits-nonzero-after-result"),
      graceMs,
      only: ["handshake", "text", "tool-events", "processes"],
    });
    for (const c of report.cases) {
      assert.equal(c.status, "failed", `${c.id} passed`);
      assert.match(
        c.message,
        /nonzero_exit_after_result: the harness exited with code 1 after writing a completed result; a harness exits with code 0 once its result is out/,
        c.id,
      );
    }
    assert.equal(report.cases.length, 4);
    // The kit's first session, which learns what the harness declares, is no case: it still learns it.
    assert.equal(report.harness?.name, "minimal-agent");
    assert.equal(report.capabilities?.permissions, true);

    // So does a second result, in a case that checks only the result's stop reason.
    const twice = await runConformance({ command: broken("two-results"), graceMs, only: ["protocol-version"] });
    assert.equal(twice.cases[0]?.status, "failed");
    assert.match(twice.cases[0]?.message ?? "", /^the session failed \(duplicate_result\)/);
  });

  void it("say the harness made no model call rather than naming tools nobody called", async () => {
    const report = await runConformance({
      command: broken("no-model-call"),
      graceMs,
      only: ["tool-events", "working-dir"],
    });
    const got = messages(report);
    for (const id of ["tool-events", "working-dir"]) {
      assert.equal(got[id]?.[0], "failed", `${id}: ${got[id]?.[1]}`);
      assert.match(
        got[id]?.[1] ?? "",
        /^the harness made no model call \(it ended STOP_REASON_COMPLETED\), so the kit's model could not call its tools/,
      );
      assert.doesNotMatch(got[id]?.[1] ?? "", /the model called {2}and/);
    }
  });

  void it("say why a route went untested when the host refused the harness's result line", async () => {
    // route "auto": a harness that calls no model leaves both routes untested, each with what it did instead.
    const report = await runConformance({ command: broken("lowercase-stop-reason"), graceMs, only: ["text"] });
    assert.ok(report.untestedRoutes.length > 0);
    for (const { reason } of report.untestedRoutes)
      // The harness did write one: "without a result" alone sent its author looking for a missing line (newcomer review).
      assert.match(
        reason,
        /made no model call \(it ended failed without a result the host took \(invalid_event: .*"completed" is not a StopReason name/,
      );
  });

  void it("name the stop reason of a result the harness ended with instead of being cancelled", async () => {
    const report = await runConformance({
      command: broken("refuses-openai"),
      graceMs,
      route: "both",
      only: ["cancellation", "cancelled-result"],
    });
    for (const c of report.cases) {
      assert.equal(c.status, "failed", c.id);
      assert.match(
        c.message,
        /^the OpenAI route: the harness ended the session itself with a STOP_REASON_ERROR result \(error: this harness serves only anthropic\/… models, not openai\/gpt-conformance\) before the kit cancelled it; the kit cancels a session while it waits on its model, and this one made no model call/,
        c.id,
      );
      assert.doesNotMatch(c.message, /the Anthropic route/);
    }
  });

  void it("hint at unflushed stdout when a session saw no line before its deadline", async () => {
    const report = await runConformance({
      command: broken("buffers-stdout"),
      graceMs,
      caseTimeoutMs: 3000,
      route: "anthropic",
      only: ["permission-allow"],
    });
    const message = report.cases[0]?.message ?? "";
    assert.equal(report.cases[0]?.status, "failed", message);
    assert.match(message, /^the session failed \(deadline_exceeded\)/);
    assert.match(
      message,
      /the harness wrote no line to stdout before the deadline: if it wrote events, they are still in its stdout buffer; flush stdout after each line \(Python: print\(line, flush=True\); Go: Flush\(\) a bufio\.Writer, or write to os\.Stdout directly\)/,
    );
  });

  void it("warn that a harness declaring no permissions capability must not claim permissions: true in its manifest", async () => {
    const report = await runConformance({
      command: broken("declares-nothing"),
      graceMs,
      route: "anthropic",
      only: ["text", "permission-allow"],
    });
    assert.equal(report.ok, true);
    assert.deepEqual(report.notices, [
      "the permission cases were not run: the harness declared no permissions capability in started; so its plugin manifest must not say permissions: true (on the stack, a harness whose manifest says so and whose started does not fails each job at its start), and without it the orchestrator refuses agents on it that set harness.requires_approval, hooks or approvals",
    ]);
    // The CLI prints it as a warning line: conformance.test.ts's CLI test.
    const declared = await runConformance({ command: broken("correct"), graceMs, only: ["text"] });
    assert.deepEqual(declared.notices, []);
  });

  void it("warn when the harness's program lies outside the folders a session sees under bubblewrap", async () => {
    // A program in a folder of its own, as a pyenv shim or a virtualenv's python is.
    const dir = await mkdtemp(path.join(tmpdir(), "oz0-kit-program-"));
    try {
      const runner = path.join(dir, "run-node");
      await writeFile(runner, '#!/bin/sh\nexec node "$@"\n', { mode: 0o755 });
      const report = await runConformance({
        command: [runner, here("./fixtures/broken/correct.mjs")],
        graceMs,
        only: ["text"],
      });
      assert.equal(report.ok, true, report.cases[0]?.message);
      assert.deepEqual(report.notices, [
        `the harness's program ${runner} is outside the folders a session sees under bubblewrap on the stack (/usr, /bin, /sbin, /lib, /lib32, /lib64, node's folder, the plugin's and the session's own): there its job fails spawn_failed, not visible inside the sandbox, unless the sandbox's OZ0_SANDBOX_READ_ONLY_PATHS adds its folder; start a script through its shebang (#!/usr/bin/env python3) or name a system interpreter`,
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
