// The working-directory boundary and the claude preset's input and settings checks, as units.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { askingMode } from "../src/acp-session.js";
import { checkClaudeProjectSettings, inertClaudeCodeInput } from "../src/agent-presets.js";
import { pathOutside } from "../src/permission-bridge.js";

void test("pathOutside follows symlinks and expands ~ to the agent's HOME", async () => {
  const root = await mkdtemp(path.join(os.tmpdir(), "oz0-acp-boundary-"));
  try {
    const work = path.join(root, "work");
    const home = path.join(root, "state", "home");
    await mkdir(path.join(work, "sub"), { recursive: true });
    await mkdir(path.join(root, "outside"));
    await symlink(path.join(root, "outside"), path.join(work, "linkdir"));
    await symlink("/etc/hostname", path.join(work, "host"));
    await symlink(path.join(work, "sub"), path.join(work, "inner"));
    const outside = (p: string): string | undefined => pathOutside([p], work, home);
    // Inside, including files that do not exist yet and names that start with "..".
    for (const p of ["a.txt", "sub/new/b.txt", path.join(work, "inner", "c"), "..hidden", "~foo", "."])
      assert.equal(outside(p), undefined, p);
    for (const p of [
      "linkdir/o.txt",
      path.join(work, "linkdir", "planted.txt"),
      "host",
      "~",
      "~/.bashrc",
      "../x",
      "/etc/hostname",
      // Claude Code trims a tool's path before it reads it.
      " /etc/hostname",
      "\t../x",
      " ~/.bashrc",
      "\n/tmp/planted.txt ",
    ])
      assert.equal(outside(p), p, p);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

void test("the claude preset's input is inert: no slash command, no @ mention; other text unchanged", () => {
  const z = "\u200b";
  assert.equal(inertClaudeCodeInput("/security-review"), `${z}/security-review`);
  assert.equal(inertClaudeCodeInput("  /init now"), `${z}  /init now`);
  assert.equal(inertClaudeCodeInput("Summarize @../outside.txt"), `Summarize ${z}@../outside.txt`);
  assert.equal(inertClaudeCodeInput('@"a b.txt" and\n@c'), `${z}@"a b.txt" and\n${z}@c`);
  assert.equal(inertClaudeCodeInput("mail me at a@b.c, path a/b"), "mail me at a@b.c, path a/b");
});

void test("the claude preset refuses a working directory whose .claude settings set a permission mode", async () => {
  const work = await mkdtemp(path.join(os.tmpdir(), "oz0-acp-settings-"));
  try {
    checkClaudeProjectSettings(work);
    await mkdir(path.join(work, ".claude"));
    await writeFile(
      path.join(work, ".claude", "settings.json"),
      JSON.stringify({ permissions: { defaultMode: "default" } }),
    );
    checkClaudeProjectSettings(work);
    await writeFile(path.join(work, ".claude", "settings.local.json"), "{ not json");
    assert.throws(() => checkClaudeProjectSettings(work), /settings\.local\.json is not valid JSON/);
    await writeFile(
      path.join(work, ".claude", "settings.local.json"),
      JSON.stringify({ permissions: { defaultMode: "bypassPermissions" } }),
    );
    assert.throws(() => checkClaudeProjectSettings(work), /sets permissions\.defaultMode "bypassPermissions"/);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
});

void test("askingMode: the agent's default mode when offered, else its own unless that skips asking", () => {
  const modes = (current: string, ...ids: string[]): unknown => ({
    currentModeId: current,
    availableModes: ids.map((id) => ({ id, name: id })),
  });
  assert.deepEqual(askingMode(modes("acceptEdits", "default", "acceptEdits")), {
    mode: "default",
    current: "acceptEdits",
  });
  // codex-acp starts in `auto`, which runs commands in the working directory unasked: refused, not run.
  assert.deepEqual(askingMode(modes("auto", "read-only", "auto", "full-access")), { mode: undefined, current: "auto" });
  assert.deepEqual(askingMode(modes("auto-edit", "plan", "auto-edit")), { mode: undefined, current: "auto-edit" });
  assert.deepEqual(askingMode(modes("ask", "ask", "auto")), { mode: "ask", current: "ask" });
  assert.deepEqual(askingMode(modes("yolo", "yolo")), { mode: undefined, current: "yolo" });
  assert.deepEqual(askingMode(undefined), { mode: undefined, current: undefined });
});
