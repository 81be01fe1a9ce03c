// Sessions' folders are spread over the filesystem's inode groups (directory-spread.ts): the root's sessions/ and
// internal/ are marked the tops of directory hierarchies, where the filesystem keeps that flag (ext4 does).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { it } from "node:test";
import { prepareRoot } from "../src/session-directories.js";

/** The folder's attribute letters as lsattr prints them; undefined where they cannot be read or set here. */
function attributes(dir: string): string | undefined {
  const listed = spawnSync("lsattr", ["-d", dir], { encoding: "utf8" });
  return listed.status === 0 ? listed.stdout.split(" ")[0] : undefined;
}

/** Why the flag cannot be tried here: no e2fsprogs to read it, or a temporary folder whose filesystem has no such flag. */
function unsupported(): string | false {
  const probe = mkdtempSync(path.join(os.tmpdir(), "oz0-topdir-probe-"));
  try {
    const set = spawnSync("chattr", ["+T", probe], { stdio: "ignore" });
    return set.status === 0 && attributes(probe)?.includes("T") === true
      ? false
      : "chattr +T is not available for the temporary folder's filesystem";
  } finally {
    rmSync(probe, { recursive: true, force: true });
  }
}

void it(
  "marks the root's sessions/ and internal/ the tops of directory hierarchies",
  { skip: unsupported() },
  async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-spread-"));
    try {
      const root = await prepareRoot(path.join(dir, "root"));
      for (const name of ["sessions", "internal"])
        assert.match(attributes(path.join(root, name)) ?? "", /T/, `${name}/ has the T attribute`);
      // A session's own folder is no such top: what the session makes stays near it.
      const session = path.join(root, "sessions", "ses_1");
      mkdirSync(session);
      assert.doesNotMatch(attributes(session) ?? "", /T/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
