// A plugin's symbolic links stay inside its folder. The orchestrator reads a
// plugin's instructions (and graphs, modules) in its own process: a link
// named like a prompt but leading to the owner's credential, or any file the
// orchestrator can read, was installed as the agent's instructions, shown by
// `oz0 agents show` and sent to the model (found by an attacker review). Such
// a plugin is refused at install; a link inside the plugin still works, from
// a folder and from a git repository alike.
import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readlinkSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { commitAll } from "./support/test-stack.js";

const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-plugin-links-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

const home = path.join(scratch, "home");
mkdirSync(path.join(home, "credentials"), { recursive: true });
writeFileSync(path.join(home, "credentials", "owner"), "oz0_the-owner-credential\n");
const store = new SqliteJobStore({ file: ":memory:" });
const registry = new PluginRegistry({ store, home });

/**
 * A plugin whose agent's instructions are prompts/p.md, made by `link` (a symlink's target) or as a file; in
 * `scratch/<name>`, or in `at`.
 */
function plugin(name: string, link?: string, at = path.join(scratch, name)): string {
  const dir = at;
  mkdirSync(path.join(dir, "agents"), { recursive: true });
  mkdirSync(path.join(dir, "prompts"));
  writeFileSync(path.join(dir, "prompts", "real.md"), "You are a plain agent.\n");
  if (link === undefined) writeFileSync(path.join(dir, "prompts", "p.md"), "You are a plain agent.\n");
  else symlinkSync(link, path.join(dir, "prompts", "p.md"));
  writeFileSync(
    path.join(dir, "oz0-plugin.yaml"),
    `name: ${name}\nversion: 0.1.0\nharnesses:\n  - name: fake\n    command: ["oz0-fake-harness"]\n    permissions: true\nagents: [agents/a.yaml]\n`,
  );
  writeFileSync(
    path.join(dir, "agents", "a.yaml"),
    `name: ${name}-agent\nruntime: harness:fake\nmodel:\n  primary: anthropic/x\ninstructions: prompts/p.md\n`,
  );
  return dir;
}

void test("a plugin whose link leads out of its folder is refused, naming the link; the credential is read by nobody", async () => {
  const outside = [
    ["climbing", "../../../../credentials/owner"],
    ["absolute", path.join(home, "credentials", "owner")],
    ["sideways", "../../other/secret.md"],
  ] as const;
  for (const [name, target] of outside) {
    const dir = plugin(name, target);
    await assert.rejects(
      registry.install({ source: dir }),
      new RegExp(
        `prompts/p\\.md: a symbolic link to ${target.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}, outside the plugin`,
      ),
      name,
    );
    await commitAll(dir, "plugin");
    await assert.rejects(registry.install({ source: `file://${dir}` }), /outside the plugin/, `${name}, from git`);
  }
  assert.deepEqual(
    (await store.listAgents()).map((a) => a.name),
    [],
    "nothing was installed",
  );
});

void test("a link inside the plugin installs, and reads what it leads to", async () => {
  const dir = plugin("inside", "real.md");
  await registry.install({ source: dir });
  const [agent] = await store.listAgents();
  assert.equal(agent?.instructions, "You are a plain agent.\n");
});

void test("installed again from another checkout, every copy of the plugin uses that checkout's node_modules", async () => {
  // Two checkouts, each with its dependencies, and the plugin a little different in each (a README): two copies.
  // An agent version whose harness did not change keeps running the first copy, so its link must follow too.
  const checkouts = ["first", "second"].map((name) => {
    const root = path.join(scratch, "checkouts", name);
    mkdirSync(path.join(root, "node_modules"), { recursive: true });
    const dir = plugin("deps", undefined, path.join(root, "plugins", "deps"));
    writeFileSync(path.join(dir, "README.md"), `from the ${name} checkout\n`);
    return { root, dir };
  });
  const copies = path.join(home, "plugins", "deps");
  const links = () =>
    readdirSync(copies)
      .map((copy) => readlinkSync(path.join(copies, copy, "node_modules")))
      .sort();
  await registry.install({ source: checkouts[0]!.dir });
  assert.deepEqual(links(), [path.join(checkouts[0]!.root, "node_modules")]);
  await registry.install({ source: checkouts[1]!.dir });
  assert.deepEqual(links(), [
    path.join(checkouts[1]!.root, "node_modules"),
    path.join(checkouts[1]!.root, "node_modules"),
  ]);
});

void test("a plugin from a folder closed to other users is installed readable by every user, and so is a copy made before", async () => {
  // A root sandbox runs each session under a uid of its own, which reads the plugin's copy as any other user does.
  const dir = plugin("closed");
  const script = path.join(dir, "harness.sh");
  writeFileSync(script, "#!/bin/sh\n", { mode: 0o700 });
  writeFileSync(path.join(dir, "notes.md"), "private\n", { mode: 0o600 });
  for (const folder of [dir, path.join(dir, "prompts"), path.join(dir, "agents")]) chmodSync(folder, 0o700);
  const modes = (root: string): Record<string, string> =>
    Object.fromEntries(
      ["", "prompts", "agents", "harness.sh", "notes.md", "prompts/p.md"].map((rel) => [
        rel,
        (statSync(path.join(root, rel)).mode & 0o777).toString(8),
      ]),
    );
  const copyOf = (): string => {
    const copies = path.join(home, "plugins", "closed");
    return path.join(copies, readdirSync(copies)[0]!);
  };
  const open = {
    "": "755",
    prompts: "755",
    agents: "755",
    "harness.sh": "755",
    "notes.md": "644",
    "prompts/p.md": "644",
  };
  // The folders above the copy, made with the services' umask of 077, as a stack's plugins folder is.
  for (const folder of [path.join(home, "plugins"), path.join(home, "plugins", "closed")]) {
    mkdirSync(folder, { recursive: true });
    chmodSync(folder, 0o700);
  }
  await registry.install({ source: dir });
  assert.deepEqual(modes(copyOf()), open);
  // A session of the user mode reaches its copy by its path: passable, not listable.
  for (const folder of [path.join(home, "plugins"), path.join(home, "plugins", "closed")])
    assert.equal((statSync(folder).mode & 0o777).toString(8), "711", folder);
  // A copy an earlier version installed kept its source's modes: installing the same plugin again opens it.
  chmodSync(copyOf(), 0o700);
  chmodSync(path.join(copyOf(), "notes.md"), 0o600);
  await registry.install({ source: dir });
  assert.deepEqual(modes(copyOf()), open);
});
