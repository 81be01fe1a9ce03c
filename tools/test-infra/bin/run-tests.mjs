#!/usr/bin/env node
// `npm test`: run every package's tests (files named *.test.ts under a
// package's test/ folder) with Node's test runner through tsx.
// Infrastructure the tests need (Kafka, PostgreSQL) is started here when
// KAFKA_BROKERS / DATABASE_URL are unset, and stopped when the tests end.
// Every run gets a temporary folder of its own (TMPDIR), and a run that leaves
// anything in it fails, naming what was left (run-tmpdir.mjs). A run in which
// any file's results did not all reach the runner fails, naming the file
// (file-summaries.mjs).
// Usage: run-tests.mjs [path-substring | file.test.ts ...]   (only matching
// test files; a path to a .test.ts file runs it, even under fixtures/)
import "./exit-by-exec.mjs";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileSummaryProblems } from "./file-summaries.mjs";
import { closeRunTmpdir, describeLeftovers, openRunTmpdir } from "./run-tmpdir.mjs";
import { root, workspaceDirs } from "./workspaces.mjs";

const filters = process.argv.slice(2);

function testFiles(dir) {
  const out = [];
  const walk = (d) => {
    let entries;
    try {
      entries = readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.name === "node_modules" || e.name === "dist" || e.name === "fixtures") continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".test.ts")) out.push(p);
    }
  };
  walk(path.join(dir, "test"));
  return out;
}

const named = filters.map((f) => path.resolve(root, f)).filter((f) => f.endsWith(".test.ts") && existsSync(f));
const files = [
  ...new Set([
    ...workspaceDirs()
      .flatMap(testFiles)
      .filter((f) => filters.length === 0 || filters.some((x) => f.includes(x))),
    ...named,
  ]),
].sort();

if (files.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}

// The Debian packages the tests use (bubblewrap, PostgreSQL, git, setpriv):
// installed here when missing and run as root, else a stop at once that names
// the command, so `npm test` on a fresh machine needs no step before it.
const packages = spawnSync("bash", [path.join(root, "tools/test-infra/bin/install-system-packages.sh")], {
  stdio: "inherit",
});
if (packages.status !== 0) process.exit(packages.status ?? 1);

// Beside the run's folder, not in it: the runner's own record, not a test's leftover.
const summariesDir = mkdtempSync(path.join(os.tmpdir(), "oz0-file-summaries-"));
const summaries = path.join(summariesDir, "summaries.jsonl");
// Set before anything starts, so Kafka's and PostgreSQL's folders are in it too.
const runTmp = openRunTmpdir();
process.env.TMPDIR = runTmp;
process.on("exit", () => {
  rmSync(runTmp, { recursive: true, force: true });
  rmSync(summariesDir, { recursive: true, force: true });
});

const { startInfrastructure } = await import("./infrastructure.mjs");
const infra = await startInfrastructure({ root, files });

// A test that hangs fails after ten minutes (the longest, the cluster's
// acceptance test, takes under four on a loaded machine), and its file then
// exits even though what it started still holds the event loop: before, one
// stuck wait held the whole run until CI's 90 minutes ran out, and the
// report named no test. A test that needs longer says so with its own timeout.
// That forced exit dropped whatever of a file's results was still queued on
// its stdout, unless the stdout blocks (blocking-stdio.mjs). And a forced exit
// could itself hang for good in Node's teardown (exit-by-exec.mjs).
const TEST_TIMEOUT_MS = 600_000;
const binDir = path.join(root, "tools/test-infra/bin");
const child = spawn(
  process.execPath,
  [
    "--import",
    path.join(binDir, "blocking-stdio.mjs"),
    "--import",
    path.join(binDir, "exit-by-exec.mjs"),
    "--import",
    "tsx",
    "--test",
    "--test-reporter=spec",
    "--test-reporter-destination=stdout",
    `--test-reporter=${path.join(binDir, "file-summaries.mjs")}`,
    "--test-reporter-destination=stderr",
    `--test-timeout=${TEST_TIMEOUT_MS}`,
    "--test-force-exit",
    ...files.map((f) => path.relative(root, f)),
  ],
  {
    cwd: root,
    stdio: "inherit",
    env: { OZ0_LOG_LEVEL: "warn", ...process.env, ...infra.env, OZ0_TEST_FILE_SUMMARIES: summaries },
  },
);
let interrupted = false;
const stopOnSignal = (signal) => {
  interrupted = true;
  child.kill(signal);
};
process.on("SIGINT", stopOnSignal);
process.on("SIGTERM", stopOnSignal);
const code = await new Promise((resolve) => child.on("exit", (c, s) => resolve(c ?? (s ? 1 : 0))));
await infra.stop();
let failed = code !== 0;
const missing = interrupted ? [] : fileSummaryProblems({ record: summaries, files, root });
if (missing.length > 0) {
  console.error(
    `\nthe results of ${missing.length} test file(s) did not all reach the runner, so this run proves nothing of what is missing:\n  ${missing.join("\n  ")}\n` +
      "a process that exits before its last results are read (process.exit() in code under test, a crash at exit code 0) does this: run the file alone to see where its report stops",
  );
  failed = true;
}
const left = closeRunTmpdir(runTmp);
if (left.length > 0 && !interrupted) {
  console.error(`\n${describeLeftovers(left, { root, packageDirs: workspaceDirs() })}`);
  failed = true;
}
process.exit(failed ? code || 1 : 0);
