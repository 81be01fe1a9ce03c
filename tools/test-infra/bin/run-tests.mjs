#!/usr/bin/env node
// `npm test`: run every package's tests (files named *.test.ts under a
// package's test/ folder) with Node's test runner through tsx.
// Infrastructure the tests need (Kafka, PostgreSQL) is started here when
// KAFKA_BROKERS / DATABASE_URL are unset, and stopped when the tests end.
// Every run gets a temporary folder of its own (TMPDIR), and a run that leaves
// anything in it fails, naming what was left (run-tmpdir.mjs).
// Usage: run-tests.mjs [path-substring | file.test.ts ...]   (only matching
// test files; a path to a .test.ts file runs it, even under fixtures/)
import { spawn, spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync } from "node:fs";
import path from "node:path";
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

// Set before anything starts, so Kafka's and PostgreSQL's folders are in it too.
const runTmp = openRunTmpdir();
process.env.TMPDIR = runTmp;
process.on("exit", () => rmSync(runTmp, { recursive: true, force: true }));

const { startInfrastructure } = await import("./infrastructure.mjs");
const infra = await startInfrastructure({ root, files });

// A test that hangs fails after ten minutes (the longest, the cluster's
// acceptance test, takes under four on a loaded machine), and its file then
// exits even though what it started still holds the event loop: before, one
// stuck wait held the whole run until CI's 90 minutes ran out, and the
// report named no test. A test that needs longer says so with its own timeout.
const TEST_TIMEOUT_MS = 600_000;
const child = spawn(
  process.execPath,
  [
    "--import",
    "tsx",
    "--test",
    "--test-reporter=spec",
    `--test-timeout=${TEST_TIMEOUT_MS}`,
    "--test-force-exit",
    ...files.map((f) => path.relative(root, f)),
  ],
  { cwd: root, stdio: "inherit", env: { OZ0_LOG_LEVEL: "warn", ...process.env, ...infra.env } },
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
const left = closeRunTmpdir(runTmp);
if (left.length > 0 && !interrupted) {
  console.error(`\n${describeLeftovers(left, { root, packageDirs: workspaceDirs() })}`);
  process.exit(code || 1);
}
process.exit(code);
