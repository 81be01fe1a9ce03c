// Runs the demo's check (check-harness.mjs) as a session of the stack's
// sandbox: the job's patch applied to a fresh copy of the project, and its
// tests run, under the same isolation as the agent's own session. Running
// them on the demo's machine instead would hand code the agent wrote the
// shell's environment (a provider key), the stack's credentials and the
// user's files.
import { randomUUID } from "node:crypto";
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const orchestratorDist = path.resolve(here, "..", "..", "..", "services", "orchestrator", "dist");

/** How long the check may run: a test the patch made hang would otherwise hold the demo. */
const CHECK_DEADLINE_MS = 5 * 60_000;

/**
 * `sandboxUrl` and `token` (the orchestrator's credential for sandboxes) reach the stack's sandbox; `home` is its
 * data directory, where the check's harness is put for sessions to reach, as installed plugins are; `project` is a
 * folder and `patch` the job's changes.patch, whose paths start with the project's folder name.
 * Resolves to `{ passed, output, error }`: the tests' output, and why it did not pass. `deadlineMs`: the session is
 * cancelled past it (default 5 minutes).
 */
export async function checkPatchInSandbox({ sandboxUrl, token, home, project, patch, deadlineMs = CHECK_DEADLINE_MS }) {
  const { SandboxClient } = await import(path.join(orchestratorDist, "sessions", "sandbox-client.js"));
  // Sessions reach it as they reach installed plugins: a folder of the data directory, open to other users.
  const pluginDir = path.join(home, "demo-check");
  mkdirSync(pluginDir, { recursive: true });
  chmodSync(pluginDir, 0o755);
  const harness = path.join(pluginDir, "check-harness.mjs");
  copyFileSync(path.join(here, "check-harness.mjs"), harness);
  chmodSync(harness, 0o644);
  // Attachments must lie outside the data directory, which sessions may not see.
  const copy = mkdtempSync(path.join(os.tmpdir(), "oz0-demo-check-"));
  const name = path.basename(project);
  const sandbox = new SandboxClient({ url: sandboxUrl, token });
  const sessionId = `ses_demo_check_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
  let channel;
  let late = false;
  const deadline = setTimeout(() => {
    late = true;
    sandbox.cancel({ sessionId, reason: "the demo's check ran past its deadline" }).catch(() => undefined);
  }, deadlineMs);
  try {
    cpSync(project, path.join(copy, name), { recursive: true });
    copyFileSync(patch, path.join(copy, "changes.patch"));
    channel = sandbox.start({
      request: { sessionId, jobId: "demo-check", input: JSON.stringify({ project: name, patch: "changes.patch" }) },
      command: [process.execPath, harness],
      pluginDir,
      attachments: [path.join(copy, name), path.join(copy, "changes.patch")],
    });
    for await (const message of channel) {
      if (message.kind !== "exited") continue;
      const output = message.result?.text ?? "";
      const error =
        (late ? `the tests ran past ${deadlineMs / 1000} s and were stopped` : "") ||
        message.failure ||
        message.error ||
        message.result?.error ||
        "";
      return { passed: message.exitCode === 0 && error === "" && message.result !== undefined, output, error };
    }
    return { passed: false, output: "", error: "the check's session ended without a result" };
  } finally {
    clearTimeout(deadline);
    channel?.close();
    rmSync(copy, { recursive: true, force: true });
    rmSync(pluginDir, { recursive: true, force: true });
  }
}
