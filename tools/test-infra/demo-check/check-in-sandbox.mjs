// Runs the demo's check (check-harness.mjs) as a session of the stack's
// sandbox: the job's patch applied to a fresh copy of the project, and its
// tests run, under the same isolation as the agent's own session. Running
// them on the demo's machine instead would hand code the agent wrote the
// shell's environment (a provider key), the stack's credentials and the
// user's files.
import { chmodSync, copyFileSync, cpSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const orchestratorDist = path.resolve(here, "..", "..", "..", "services", "orchestrator", "dist");

/**
 * `sandboxUrl` and `token` (the orchestrator's credential for sandboxes) reach the stack's sandbox; `home` is its
 * data directory, where the check's harness is put for sessions to reach, as installed plugins are; `project` is a
 * folder and `patch` the job's changes.patch, whose paths start with the project's folder name.
 * Resolves to `{ passed, output, error }`: the tests' output, and why it did not pass.
 */
export async function checkPatchInSandbox({ sandboxUrl, token, home, project, patch }) {
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
  let channel;
  try {
    cpSync(project, path.join(copy, name), { recursive: true });
    copyFileSync(patch, path.join(copy, "changes.patch"));
    channel = new SandboxClient({ url: sandboxUrl, token }).start({
      request: { jobId: "demo-check", input: JSON.stringify({ project: name, patch: "changes.patch" }) },
      command: [process.execPath, harness],
      pluginDir,
      attachments: [path.join(copy, name), path.join(copy, "changes.patch")],
    });
    for await (const message of channel) {
      if (message.kind !== "exited") continue;
      const output = message.result?.text ?? "";
      const error = message.failure || message.error || message.result?.error || "";
      return { passed: message.exitCode === 0 && error === "" && message.result !== undefined, output, error };
    }
    return { passed: false, output: "", error: "the check's session ended without a result" };
  } finally {
    channel?.close();
    rmSync(copy, { recursive: true, force: true });
    rmSync(pluginDir, { recursive: true, force: true });
  }
}
