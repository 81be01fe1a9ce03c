// The SQLite store against the ProxyStore contract (proxy-store-suite.ts).
// One process uses it, so both handles are the same store.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import { describeProxyStore } from "./proxy-store-suite.js";

describeProxyStore("SqliteProxyStore", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-store-"));
  const store = new SqliteProxyStore({ dataDir });
  // A process that used the same file before this one (its budget holds die with it).
  return {
    a: store,
    b: store,
    crashed: async () => new SqliteProxyStore({ dataDir }),
    close: async () => {
      await store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
});

void test("a store made before tokens recorded their first use gains the column, and counts its tokens used (nothing shows otherwise)", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-old-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const old = new Database(path.join(dataDir, "llm-proxy.sqlite"));
  old.exec(`CREATE TABLE session_tokens (hash TEXT PRIMARY KEY, job TEXT NOT NULL, agent TEXT NOT NULL, session TEXT NOT NULL,
    budget_usd REAL NOT NULL, created_at INTEGER NOT NULL, revoked_at INTEGER);
    INSERT INTO session_tokens VALUES ('h-old', 'j', 'x', 'ses-old', 0, 1000, NULL);`);
  old.close();
  const store = new SqliteProxyStore({ dataDir });
  try {
    assert.equal((await store.findToken("h-old"))?.usedAt?.getTime(), 1000, "used, as of its creation");
    assert.equal((await store.useToken("h-old", new Date(2000)))?.usedAt?.getTime(), 1000);
    assert.equal((await store.revokeTokens({ session: "ses-old" }, new Date(3000))).use, "used");
  } finally {
    await store.close();
  }
});

void test("a call's store work runs the statements prepared at open: none is prepared per call", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-prepared-"));
  const store = new SqliteProxyStore({ dataDir });
  t.after(async () => {
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  await store.putToken({ hash: "h", job: "j", agent: "a", session: "s", budgetUsd: 0, createdAt: new Date(1) });
  const prepare = t.mock.method(Database.prototype, "prepare");
  const identity = {
    operationId: "op-1",
    job: "j",
    agent: "a",
    session: "s",
    provider: "p",
    model: "m",
    wire: "openai",
    stream: false,
  };
  assert.ok(await store.useToken("h", new Date(2)));
  await store.beginAttempt({ ...identity, attempt: 1, startedAt: new Date(2), attemptStartedAt: new Date(2) });
  const record = {
    ...identity,
    status: 200,
    outcome: "ok" as const,
    usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
    costUsd: 0.01,
    latencyMs: 3,
    estimated: false,
    startedAt: new Date(2),
  };
  await Promise.all([store.recordAttempt({ ...record, attempt: 1 }), store.recordCall({ ...record, attempts: 1 })]);
  assert.equal(prepare.mock.callCount(), 0);
  assert.deepEqual(
    (await store.listCalls("j")).map((c) => c.operationId),
    ["op-1"],
  );
});
