// An installation that lives under the node's /tmp (CI clones there) must stay
// visible inside bubblewrap, where the session gets a private /tmp of its own.
import assert from "node:assert/strict";
import { chmodSync, copyFileSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, it } from "node:test";
import { SessionStatus } from "@oz0/proto/oz0/sandbox/v1/sandbox_pb";
import { FIXTURES, runToEnd, scenarioStart, startTestSandbox, type TestSandbox } from "./sandbox-test-kit.js";

let t: TestSandbox;
let install: string;
before(async () => {
  install = mkdtempSync(path.join(os.tmpdir(), "oz0-install-"));
  // As an installation is (mkdtemp makes it 0700): every user may read it, a root sandbox's sessions' uids too.
  chmodSync(install, 0o755);
  copyFileSync(path.join(FIXTURES, "scenario-harness.mjs"), path.join(install, "scenario-harness.mjs"));
  t = await startTestSandbox({ isolation: "bwrap", readOnlyPaths: [install] });
});
after(async () => {
  await t.close();
  rmSync(install, { recursive: true, force: true });
});

void it("runs a harness installed under /tmp while the session's own /tmp stays private", async () => {
  const stream = await runToEnd(
    t.client,
    scenarioStart(
      { mode: "complete" },
      { command: [process.execPath, path.join(install, "scenario-harness.mjs")], pluginDir: FIXTURES },
    ),
  );
  assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
});

void it("refuses a harness command outside every bound path, saying which setting makes it visible", async () => {
  // The node finds it, but inside bubblewrap it would not exist: a plain ENOENT from inside helped nobody.
  const elsewhere = mkdtempSync(path.join(os.tmpdir(), "oz0-unbound-"));
  try {
    const command = path.join(elsewhere, "harness.mjs");
    copyFileSync(path.join(FIXTURES, "scenario-harness.mjs"), command);
    chmodSync(command, 0o755);
    const stream = await runToEnd(
      t.client,
      scenarioStart({ mode: "complete" }, { command: [command], pluginDir: FIXTURES }),
    );
    assert.equal(stream.exited().status, SessionStatus.FAILED);
    assert.match(
      stream.exited().errorMessage,
      new RegExp(`${command} is not visible inside the sandbox.*OZ0_SANDBOX_READ_ONLY_PATHS`),
    );
  } finally {
    rmSync(elsewhere, { recursive: true, force: true });
  }
});

void it("runs a plugin whose folder links its dependencies from elsewhere, as the orchestrator's copy does", async () => {
  // A plugin written outside any installation, beside its own node_modules; the orchestrator's copy of it links
  // node_modules to that folder (plugin-registry.ts), which no bound path holds.
  const source = mkdtempSync(path.join(os.tmpdir(), "oz0-js-plugin-"));
  chmodSync(source, 0o755);
  try {
    const dep = path.join(source, "node_modules", "dep");
    mkdirSync(dep, { recursive: true });
    writeFileSync(path.join(dep, "package.json"), JSON.stringify({ name: "dep", version: "1.0.0", type: "module" }));
    copyFileSync(path.join(FIXTURES, "scenario-harness.mjs"), path.join(dep, "index.mjs"));
    const plugin = path.join(source, "copy");
    mkdirSync(plugin);
    writeFileSync(path.join(plugin, "harness.mjs"), 'await import("dep/index.mjs");\n');
    symlinkSync(path.join(source, "node_modules"), path.join(plugin, "node_modules"));
    const stream = await runToEnd(
      t.client,
      scenarioStart(
        { mode: "complete" },
        { command: [process.execPath, path.join(plugin, "harness.mjs")], pluginDir: plugin },
      ),
    );
    assert.equal(stream.exited().status, SessionStatus.COMPLETED, stream.exited().errorMessage);
  } finally {
    rmSync(source, { recursive: true, force: true });
  }
});

void it("refuses a harness its session's own uid could not read, naming the folder in the way; runs it for sessions of the sandbox's own user", async () => {
  const closed = mkdtempSync(path.join(os.tmpdir(), "oz0-closed-install-"));
  try {
    copyFileSync(path.join(FIXTURES, "scenario-harness.mjs"), path.join(closed, "harness.mjs"));
    chmodSync(path.join(closed, "harness.mjs"), 0o755);
    // As root, sessions under uids of their own (bubblewrap's and the user mode's), then (no setpriv to drop with)
    // as the sandbox's own user, which owns the folder; elsewhere all are the latter.
    const settings: { isolation: "bwrap" | "user"; setprivPath?: string }[] = [
      { isolation: "bwrap" },
      ...(process.getuid?.() === 0 ? [{ isolation: "user" as const }] : []),
      { isolation: "bwrap", setprivPath: path.join(closed, "no-setpriv-here") },
    ];
    for (const setting of settings) {
      const bound = await startTestSandbox({ readOnlyPaths: [closed], ...setting });
      try {
        const stream = await runToEnd(
          bound.client,
          scenarioStart({ mode: "complete" }, { command: [path.join(closed, "harness.mjs")], pluginDir: FIXTURES }),
        );
        const { status, errorMessage } = stream.exited();
        if (bound.sandbox.sessionUids === undefined) {
          assert.equal(status, SessionStatus.COMPLETED, errorMessage);
          continue;
        }
        assert.equal(status, SessionStatus.FAILED);
        assert.match(
          errorMessage,
          new RegExp(
            `the harness command ${closed}/harness.mjs cannot be reached by the session's own uid \\d+: ${closed} \\(mode 0700\\) does not let other users through`,
          ),
        );
      } finally {
        await bound.close();
      }
    }
  } finally {
    rmSync(closed, { recursive: true, force: true });
  }
});

// In the user mode the uid reaches the plugin by its path (no bind, as under bubblewrap): a plugin beneath a folder
// other users cannot pass (the data directory's plugins folder once was, 0700) is refused by name, not left to fail
// as a harness whose module is not found.
void it(
  "refuses, in the user mode, a plugin folder its session's own uid could not reach, naming the folder in the way",
  { skip: process.getuid?.() !== 0 && "the user mode needs root" },
  async () => {
    const closed = mkdtempSync(path.join(os.tmpdir(), "oz0-closed-plugins-"));
    const plugin = path.join(closed, "example", "0123456789abcdef");
    mkdirSync(plugin, { recursive: true });
    chmodSync(plugin, 0o755);
    const user = await startTestSandbox({ isolation: "user" });
    try {
      const stream = await runToEnd(user.client, scenarioStart({ mode: "complete" }, { pluginDir: plugin }));
      assert.equal(stream.exited().status, SessionStatus.FAILED);
      assert.match(
        stream.exited().errorMessage,
        new RegExp(
          `the plugin folder ${plugin} cannot be reached by the session's own uid \\d+: ${closed} \\(mode 0700\\) does not let other users through`,
        ),
      );
      // Passable, as the orchestrator's plugin registry leaves its folders: the session runs.
      chmodSync(closed, 0o711);
      chmodSync(path.dirname(plugin), 0o711);
      const passable = await runToEnd(user.client, scenarioStart({ mode: "complete" }, { pluginDir: plugin }));
      assert.equal(passable.exited().status, SessionStatus.COMPLETED, passable.exited().errorMessage);
    } finally {
      await user.close();
      rmSync(closed, { recursive: true, force: true });
    }
  },
);
