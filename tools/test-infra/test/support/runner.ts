// `npm test`'s runner, run by a test on test files of its choosing.
import { spawn } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const runner = path.join(repoRoot, "tools/test-infra/bin/run-tests.mjs");

/** Runs the runner on `files` (paths from the repository, or absolute) with `tmp` as its TMPDIR: its exit code and all it wrote. */
export function runTests(files: string[], tmp: string): Promise<{ code: number; out: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, TMPDIR: tmp };
  // Set by the runner of this test; the inner run would report to it instead of its own output.
  delete env["NODE_TEST_CONTEXT"];
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [runner, ...files], {
      cwd: repoRoot,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("exit", (code) => resolve({ code: code ?? 1, out }));
  });
}
