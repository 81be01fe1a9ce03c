// The oz0 CLI ends its process with the SDK's exitProcess, not process.exit():
// Node's teardown can hang for good at that moment (nodejs/node#54918), and a
// CLI that hangs so hangs the script that ran it. These tests hold that each
// way out takes the path with no teardown to hang in, with its exit code and
// all it wrote.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { cliMain } from "./support/test-stack.js";

/** Prints, on stderr, the command line of an execve the process makes. */
const watchExecve = `data:text/javascript,${encodeURIComponent(
  'import d from "node:diagnostics_channel"; d.subscribe("process.execve", ({ args }) => process.stderr.write("execve " + args.join(" ") + "\\n"));',
)}`;

function cli(args: string[], env: Record<string, string> = {}) {
  return spawnSync(process.execPath, ["--import", watchExecve, cliMain, ...args], {
    encoding: "utf8",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", ...env },
  });
}

void test("the CLI exits by execve after a command, a usage error and a failed call, with their exit codes", (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-cli-exit-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));

  const help = cli(["--help"]);
  assert.equal(help.status, 0, help.stderr);
  assert.match(help.stdout, /^Usage: oz0 /m, "what it wrote is all there");
  assert.equal(help.stderr, "execve sh -c exit 0\n");

  const usage = cli(["jobs", "list", "--no-such-option"]);
  assert.equal(usage.status, 2, usage.stderr);
  assert.match(usage.stderr, /unknown option '--no-such-option'\n.*execve sh -c exit 2\n$/s);

  // Nothing listens on port 1: the call fails, and the CLI says so.
  const refused = cli(["jobs", "list"], { OZ0_HOME: home, OZ0_URL: "http://127.0.0.1:1", OZ0_TOKEN: "t" });
  assert.equal(refused.status, 1, refused.stderr);
  assert.match(
    refused.stderr,
    /could not reach the orchestrator at http:\/\/127\.0\.0\.1:1.*unset OZ0_URL.*\nexecve sh -c exit 1\n$/s,
  );
});

void test("oz0 deny without --reason is a usage error like the others: oz0's prefix, and what a reason is for", (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-cli-deny-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  // Nothing listens at OZ0_URL: the usage error comes before any connection.
  const denied = cli(["deny", "job-1", "perm-2"], { OZ0_HOME: home, OZ0_URL: "http://127.0.0.1:1", OZ0_TOKEN: "t" });
  assert.equal(denied.status, 2, denied.stderr);
  assert.match(
    denied.stderr,
    /^oz0: oz0 deny needs --reason TEXT: why the call is denied, which the model reads .*oz0 deny job-1 perm-2 --reason "not on a Friday"\n/,
  );
  assert.doesNotMatch(denied.stderr, /required option/);
});
