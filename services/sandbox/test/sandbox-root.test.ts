// The sandbox root: made by the sandbox, or by root. The default, <tmpdir>/oz0-sandbox, is anybody's to make before
// the sandbox first starts (a local user, a `user`-mode session of another sandbox on the host), and in a root of
// theirs they could swap internal/ or sessions/ for a link to a node folder, which the sandbox emptied as root at its
// start as a previous run's leftovers (attacker review).
import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
  lchownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { testCredentials } from "@oz0/serving/testing";
import { startSandbox } from "../src/index.js";

const OTHER = 3_600_000 + (process.pid % 100_000);

/** A sandbox on `root`, isolating nothing: only its root is under test here. */
const startOn = (root: string) =>
  startSandbox({ port: 0, root, isolation: "none", auth: testCredentials.settingsFor("sandbox") });

void it(
  "refuses a root another user made, and empties nothing a link of theirs in it leads to",
  { skip: process.getuid?.() !== 0 && "needs root" },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-root-squat-"));
    try {
      // A node folder of root's, with a file in it.
      const node = path.join(dir, "node-folder");
      mkdirSync(node, { mode: 0o755 });
      writeFileSync(path.join(node, "precious"), "root's");
      // Two roots another user made first: one whose internal/ leads to it, one that is itself a link of theirs to it.
      const squatted = path.join(dir, "squatted");
      mkdirSync(squatted, { mode: 0o755 });
      symlinkSync(node, path.join(squatted, "internal"));
      const linked = path.join(dir, "linked");
      symlinkSync(node, linked);
      for (const made of [squatted, path.join(squatted, "internal"), linked]) chownSync(made, OTHER, OTHER);
      // Where every user may make them, as in /tmp.
      chmodSync(dir, 0o1777);
      for (const root of [squatted, linked]) {
        let started;
        try {
          started = await startOn(root);
        } catch (error) {
          assert.match((error as Error).message, new RegExp(`sandbox root ${root} is unsafe: .* uid ${OTHER}`));
        } finally {
          await started?.close();
        }
        assert.ok(started === undefined, `a sandbox refuses to start on ${root}`);
        assert.ok(existsSync(path.join(node, "precious")), "the node folder keeps its file");
        assert.equal(statSync(node).mode & 0o7777, 0o755, "and its mode");
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

void it(
  "takes a root of another uid that only root could have put there (a volume a user namespace shows so)",
  { skip: process.getuid?.() !== 0 && "needs root" },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-root-volume-"));
    try {
      chmodSync(dir, 0o755);
      const volume = path.join(dir, "volume");
      mkdirSync(volume, { mode: 0o777 });
      chownSync(volume, 65534, 65534);
      const sandbox = await startOn(volume);
      await sandbox.close();
      // Its own folders in it are the sandbox's.
      for (const name of ["sessions", "internal"])
        assert.equal(statSync(path.join(volume, name)).uid, process.getuid?.());
      // One another user made in it is still refused: the volume's owner could have.
      rmSync(path.join(volume, "internal"), { recursive: true });
      mkdirSync(path.join(volume, "internal"));
      chownSync(path.join(volume, "internal"), OTHER, OTHER);
      await assert.rejects(
        startOn(volume),
        new RegExp(`internal belongs to uid ${OTHER}, .* in ${volume}, which other users may write`),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);

// Whoever may write a folder on the way to the root may swap what follows it at any time: a link of theirs higher up
// the path aimed the sandbox at a node folder of that name, which it made 0711 and whose internal/ it emptied; and a
// root the sandbox made itself in a folder of theirs was theirs to replace after the check, before the start emptied
// its internal/ (attacker review).
void it(
  "refuses a root reached through a folder another user may write, at any step of its path",
  { skip: process.getuid?.() !== 0 && "needs root" },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-root-way-"));
    try {
      chmodSync(dir, 0o755);
      // A node folder named as the root is, with a previous run's internal/ and a file in it.
      const node = path.join(dir, "node");
      const victim = path.join(node, "oz0-sandbox");
      mkdirSync(path.join(victim, "internal", "kept"), { recursive: true });
      writeFileSync(path.join(victim, "internal", "kept", "precious"), "root's");
      chmodSync(victim, 0o700);
      // A folder of another user's, with a link of theirs to the node folder.
      const theirs = path.join(dir, "theirs");
      mkdirSync(theirs, { mode: 0o755 });
      symlinkSync(node, path.join(theirs, "link"));
      lchownSync(path.join(theirs, "link"), OTHER, OTHER);
      chownSync(theirs, OTHER, OTHER);
      // And one every user may write, without the sticky bit.
      const open = path.join(dir, "open");
      mkdirSync(open);
      chmodSync(open, 0o777);
      for (const [root, why] of [
        [path.join(theirs, "link", "oz0-sandbox"), `${theirs} belongs to uid ${OTHER}`],
        [path.join(theirs, "made-by-the-sandbox"), `${theirs} belongs to uid ${OTHER}`],
        [path.join(open, "made-by-the-sandbox"), `${open} may be written by every user`],
      ] as const) {
        let refusal: Error | undefined;
        await startOn(root).then(
          (started) => started.close(),
          (error: Error) => (refusal = error),
        );
        assert.ok(
          refusal?.message.includes(`the sandbox root ${root} is unsafe: ${why}`),
          `${root}: ${refusal?.message}`,
        );
      }
      assert.ok(existsSync(path.join(victim, "internal", "kept", "precious")), "the node folder keeps its file");
      assert.equal(statSync(victim).mode & 0o7777, 0o700, "and its mode");
      // The default's way, through /tmp (every user's, with the sticky bit), to a root of the sandbox's own is taken.
      const sandbox = await startOn(path.join(dir, "own"));
      await sandbox.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
