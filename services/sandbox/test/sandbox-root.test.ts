// The sandbox root: made by the sandbox, or by root. The default, <tmpdir>/oz0-sandbox, is anybody's to make before
// the sandbox first starts (a local user, a `user`-mode session of another sandbox on the host), and in a root of
// theirs they could swap internal/ or sessions/ for a link to a node folder, which the sandbox emptied as root at its
// start as a previous run's leftovers (attacker review).
import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
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
          started = await startSandbox({
            port: 0,
            root,
            isolation: "none",
            auth: testCredentials.settingsFor("sandbox"),
          });
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
      const sandbox = await startSandbox({
        port: 0,
        root: volume,
        isolation: "none",
        auth: testCredentials.settingsFor("sandbox"),
      });
      await sandbox.close();
      // Its own folders in it are the sandbox's.
      for (const name of ["sessions", "internal"])
        assert.equal(statSync(path.join(volume, name)).uid, process.getuid?.());
      // One another user made in it is still refused: the volume's owner could have.
      rmSync(path.join(volume, "internal"), { recursive: true });
      mkdirSync(path.join(volume, "internal"));
      chownSync(path.join(volume, "internal"), OTHER, OTHER);
      await assert.rejects(
        startSandbox({ port: 0, root: volume, isolation: "none", auth: testCredentials.settingsFor("sandbox") }),
        new RegExp(`internal belongs to uid ${OTHER}, .* in ${volume}, which other users may write`),
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
