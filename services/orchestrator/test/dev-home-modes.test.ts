// What `oz0 dev` makes in its data directory is as closed as the embedded
// stack's: the home passable but not listable (sessions running as uids of
// their own reach their working directory under <home>/sandbox, and nothing
// else), the logs folder its user's alone. oz0 dev's home was made by its lock
// with the umask's mode (0755), and its logs folder too, so a `user`-mode
// session listed the home and every log's name (attacker review); the
// embedded stack had narrowed both since its start.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { takeDevLock } from "../src/dev/dev-lock.js";
import { startDevStack } from "../src/dev/dev-stack.js";

const scratch = mkdtempSync(path.join(os.tmpdir(), "oz0-dev-home-modes-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

void test("oz0 dev's home lets sessions pass but not list, and its logs are its user's alone", async (t) => {
  const home = path.join(scratch, "home");
  const umask = process.umask(0o022);
  let lock;
  try {
    // As `oz0 dev` does: the lock first, which makes the home.
    lock = await takeDevLock(home);
  } finally {
    process.umask(umask);
  }
  t.after(() => lock.release());
  const stack = await startDevStack({ home, orchestratorPort: 0, notify: () => undefined });
  t.after(() => stack.close());
  assert.equal((statSync(home).mode & 0o777).toString(8), "711", "the home lets sessions pass, but not list");
  assert.equal((statSync(path.join(home, "logs")).mode & 0o777).toString(8), "700");
  assert.equal((statSync(path.join(home, "credentials")).mode & 0o777).toString(8), "700");
});
