import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { job, jobStoreSuite } from "./job-store-suite.js";

jobStoreSuite("sqlite", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-"));
  return {
    store: new SqliteJobStore({ file: path.join(dir, "orchestrator.db") }),
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
});

// Files from before numbered migrations (served tools and the rest): sqlite-schema-upgrade.test.ts.

void test("sqlite: the log reaches orchestrator.db by a thread of its own, not by a commit crossing 1,000 pages", async (t) => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "orchestrator.db");
  const store = new SqliteJobStore({ file });
  try {
    const before = statSync(file).size;
    // A few pages of log: SQLite's own checkpoint, run by a commit on the event loop, waits for 1,000.
    for (let i = 0; i < 5; i++) await store.createJob(job(`j${i}`, { input: "x".repeat(4000) }));
    for (const deadline = Date.now() + 15_000; statSync(file).size < before + 5 * 4000;) {
      assert.ok(Date.now() < deadline, `orchestrator.db still ${statSync(file).size} bytes after 15 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await store.close();
  }
  // Reopened: everything is there.
  const again = new SqliteJobStore({ file });
  try {
    assert.equal((await again.getJob("j4"))?.input, "x".repeat(4000));
  } finally {
    await again.close();
  }
});
