import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { jobStoreSuite } from "./job-store-suite.js";

jobStoreSuite("sqlite", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-"));
  return {
    store: new SqliteJobStore({ file: path.join(dir, "orchestrator.db") }),
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
});

void test("sqlite: a data directory from before served tools opens, its jobs serving none", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-old-"));
  try {
    const file = path.join(dir, "orchestrator.db");
    // The jobs table as it was before `served_tools`.
    const old = new Database(file);
    old.exec(`CREATE TABLE jobs (
      id TEXT PRIMARY KEY, agent_name TEXT NOT NULL, agent_version INTEGER NOT NULL, input TEXT NOT NULL,
      state TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER,
      result_text TEXT NOT NULL, stop_reason INTEGER NOT NULL, error TEXT NOT NULL, session_id TEXT NOT NULL,
      sandbox_url TEXT NOT NULL, last_seq INTEGER NOT NULL, sandbox_seq INTEGER NOT NULL, attachments TEXT NOT NULL,
      token_id TEXT NOT NULL, cancel_requested_at INTEGER)`);
    old
      .prepare(
        "INSERT INTO jobs VALUES ('j_old', 'fixer', 1, 'fix it', 'running', 1, 1, NULL, '', 0, '', 'ses_1', '', 0, 0, '[]', '', NULL)",
      )
      .run();
    old.close();
    const store = new SqliteJobStore({ file });
    try {
      assert.equal((await store.getJob("j_old"))?.servedTools, "");
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
