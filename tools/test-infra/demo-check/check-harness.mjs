// The demo's check, run as a sandbox session like any harness (harness.proto's
// JSON lines): it applies the job's patch to the attached copy of the project
// and runs the project's tests. The patch is code the agent wrote, so it runs
// where the agent's own code ran, isolated, and never on the demo's machine.
// The patch's changes to test files are left out: the project's own tests
// judge it, so a patch that rewrote them cannot pass for a fix.
// Input (the request's `input`): {"project": "<folder>", "patch": "<file>"},
// both attached to the working directory.
import { spawnSync } from "node:child_process";
import path from "node:path";
import { createInterface } from "node:readline";

const OUTPUT_LIMIT = 32 * 1024;

const lines = createInterface({ input: process.stdin });
const [first] = await lines[Symbol.asyncIterator]()
  .next()
  .then((r) => [r.value]);
lines.close();
const request = JSON.parse(first);
const say = (message) => process.stdout.write(`${JSON.stringify(message)}\n`);
say({ started: { protocolVersion: "PROTOCOL_VERSION_1", harnessName: "demo-check" } });

const { project, patch } = JSON.parse(request.input);
const finish = (text, error) =>
  say({
    result: {
      stopReason: error ? "STOP_REASON_ERROR" : "STOP_REASON_COMPLETED",
      text: text.length > OUTPUT_LIMIT ? `…${text.slice(-OUTPUT_LIMIT)}` : text,
      ...(error ? { error } : {}),
    },
  });

/** What the patch may not change: the tests that judge it (`*.test.*`, anything in a `test` or `tests` folder). */
const TEST_FILES = ["*.test.*", "*/*.test.*", "**/test/**", "**/tests/**", "test/**", "tests/**"];
const applied = spawnSync("git", ["apply", ...TEST_FILES.map((glob) => `--exclude=${glob}`), patch], {
  cwd: request.workingDir,
  encoding: "utf8",
});
if (applied.status !== 0) {
  finish(
    `${applied.stdout ?? ""}${applied.stderr ?? ""}`,
    `git apply ${patch} failed (${applied.error?.message ?? `exit ${applied.status}`})`,
  );
} else {
  // This process's own test runner context would make the child report to it instead of printing.
  const env = { ...process.env };
  delete env.NODE_TEST_CONTEXT;
  const tested = spawnSync(process.execPath, ["--test"], {
    cwd: path.join(request.workingDir, project),
    encoding: "utf8",
    env,
  });
  const output = `${tested.stdout ?? ""}${tested.stderr ?? ""}`;
  finish(output, tested.status === 0 ? undefined : `node --test exited with ${tested.error?.message ?? tested.status}`);
}
