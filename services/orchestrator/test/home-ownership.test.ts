// A data directory another user made is refused before anything is read or
// written there. OZ0_HOME=/tmp/oz0 is anybody's to make first (a local user,
// a `user`-mode session's while it runs): in a home of theirs, a dev.pid
// linked to a file of root's was overwritten by `oz0 dev` run as root, a
// credentials/owner of theirs became the stack's owner credential, and a
// dev.json of theirs said where commands send their credential and a secret's
// value (attacker review). Root only: the test hands a folder to another uid.
import assert from "node:assert/strict";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { connect } from "../src/cli/connection.js";
import { takeDevLock } from "../src/dev/dev-lock.js";
import { startEmbeddedStack } from "../src/dev/embedded-stack.js";

const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-home-ownership-"));
chmodSync(scratch, 0o755);
after(() => rmSync(scratch, { recursive: true, force: true }));
const skip = process.geteuid?.() !== 0 ? "needs root, to give a folder to another uid" : false;
const STRANGER = 260_777;
const REFUSED = /OZ0_HOME\) belongs to uid 260777, neither this user's \(0\) nor root's.*OZ0_HOME=\$\(mktemp -d\)$/;

/** A home another user made, with a dev.pid linked to a file of root's and an owner credential of theirs. */
function squatted(name: string): { home: string; victim: string } {
  const home = path.join(scratch, name);
  const victim = path.join(scratch, `${name}-victim`);
  writeFileSync(victim, "root's own\n", { mode: 0o600 });
  mkdirSync(path.join(home, "credentials"), { recursive: true });
  symlinkSync(victim, path.join(home, "dev.pid"));
  writeFileSync(path.join(home, "credentials", "owner"), "the-strangers-own-credential\n");
  writeFileSync(path.join(home, "dev.json"), JSON.stringify({ url: "http://127.0.0.1:1", pid: process.pid, urls: {} }));
  for (const entry of [home, path.join(home, "credentials"), path.join(home, "credentials", "owner")])
    chownSync(entry, STRANGER, STRANGER);
  return { home, victim };
}

void test("oz0 dev's lock refuses another user's home, and writes nothing through its links", { skip }, async () => {
  const { home, victim } = squatted("dev");
  await assert.rejects(takeDevLock(home), REFUSED);
  assert.equal(readFileSync(victim, "utf8"), "root's own\n");
});

void test(
  "the embedded stack refuses another user's home before it reads the owner credential there",
  { skip },
  async () => {
    const { home } = squatted("embedded");
    await assert.rejects(startEmbeddedStack({ home }), REFUSED);
  },
);

void test("a command refuses another user's home before it reads its dev.json or credentials", { skip }, async () => {
  const { home } = squatted("command");
  const saved = process.env.OZ0_URL;
  delete process.env.OZ0_URL;
  try {
    await assert.rejects(connect({ home }), REFUSED);
  } finally {
    if (saved !== undefined) process.env.OZ0_URL = saved;
  }
});

void test("a home every user may write is refused too", { skip }, async () => {
  const home = path.join(scratch, "open");
  mkdirSync(home, { mode: 0o777 });
  chmodSync(home, 0o777);
  await assert.rejects(takeDevLock(home), /OZ0_HOME\) may be written by every user/);
});
