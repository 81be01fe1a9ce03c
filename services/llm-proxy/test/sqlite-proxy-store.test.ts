// The SQLite store against the ProxyStore contract (proxy-store-suite.ts).
// One process uses it, so both handles are the same store.
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import { describeProxyStore } from "./proxy-store-suite.js";

/** A call of job "j" as the proxy hands it to the store. */
const identity = (operationId: string) => ({
  operationId,
  job: "j",
  agent: "a",
  session: "s",
  provider: "p",
  model: "m",
  wire: "openai",
  stream: false,
});
const pending = (operationId: string) => ({
  ...identity(operationId),
  attempt: 1,
  startedAt: new Date(2),
  attemptStartedAt: new Date(2),
});
const record = (operationId: string) => ({
  ...identity(operationId),
  status: 200,
  outcome: "ok" as const,
  usage: { input: 1, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 },
  costUsd: 0.01,
  latencyMs: 3,
  estimated: false,
  startedAt: new Date(2),
});

describeProxyStore("SqliteProxyStore", async () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-store-"));
  // Not exclusive: this one process also plays a proxy that used the directory before it and died.
  const store = new SqliteProxyStore({ dataDir, exclusive: false });
  // A process that used the same file before this one (its budget holds die with it).
  return {
    a: store,
    b: store,
    crashed: async () => new SqliteProxyStore({ dataDir, exclusive: false }),
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
  await store.putToken({
    hash: "h",
    job: "j",
    agent: "a",
    session: "s",
    budgetUsd: 0,
    maxModelCalls: 0,
    createdAt: new Date(1),
  });
  const prepare = t.mock.method(Database.prototype, "prepare");
  assert.ok(await store.useToken("h", new Date(2)));
  await store.beginAttempt(pending("op-1"));
  await Promise.all([
    store.recordAttempt({ ...record("op-1"), attempt: 1 }),
    store.recordCall({ ...record("op-1"), attempts: 1 }),
  ]);
  assert.equal(prepare.mock.callCount(), 0);
  assert.deepEqual(
    (await store.listCalls("j")).map((c) => c.operationId),
    ["op-1"],
  );
});

void test("with a data directory, a call alone is in slots and its records commit up to a second later (every read commits them first), overlapping calls group-commit at the next turn; in memory a call alone commits at once", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-grouping-"));
  const store = new SqliteProxyStore({ dataDir });
  // Another connection sees only what is committed.
  const reader = new Database(path.join(dataDir, "llm-proxy.sqlite"), { readonly: true });
  const memory = new SqliteProxyStore({ dataDir: ":memory:" });
  t.after(async () => {
    reader.close();
    await store.close();
    await memory.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const committed = (table: string): string[] =>
    (reader.prepare(`SELECT operation_id FROM ${table} ORDER BY operation_id`).all() as { operation_id: string }[]).map(
      (r) => r.operation_id,
    );
  // A call alone: in flight in the slot file (in-flight-slots.test.ts), its records too; none committed yet.
  await store.beginAttempt(pending("op-1"));
  await store.recordAttempt({ ...record("op-1"), attempt: 1 });
  await store.recordCall({ ...record("op-1"), attempts: 1 });
  assert.deepEqual(committed("pending_calls"), []);
  assert.deepEqual(committed("calls"), [], "resolved from their slots, not committed yet");
  // A read commits what is waiting: the store answers with every record it resolved.
  assert.deepEqual(
    (await store.listCalls("j")).map((c) => c.operationId),
    ["op-1"],
  );
  assert.deepEqual(committed("calls"), ["op-1"]);
  assert.deepEqual(committed("attempts"), ["op-1"]);

  // Overlapping calls keep to the group commit. The first was alone when it came (a slot);
  // the second overlaps it: its row in flight commits with the turn's batch.
  await Promise.all([store.beginAttempt(pending("op-2")), store.beginAttempt(pending("op-3"))]);
  assert.deepEqual(committed("pending_calls"), ["op-3"]);
  // op-3 is still in flight: op-2's record groups with the turn's writes and resolves once committed.
  const overlapped = store.recordCall({ ...record("op-2"), attempts: 1 });
  assert.deepEqual(committed("calls"), ["op-1"]);
  await overlapped;
  assert.deepEqual(committed("calls"), ["op-1", "op-2"]);
  // The last one in flight is alone again; its row in flight is in the table, so its record commits at once.
  const last = store.recordCall({ ...record("op-3"), attempts: 1 });
  assert.deepEqual(committed("calls"), ["op-1", "op-2", "op-3"]);
  assert.deepEqual(committed("pending_calls"), []);
  await last;
  // Alone and unread, records commit on their own a few milliseconds later.
  await store.beginAttempt(pending("op-4"));
  await store.recordCall({ ...record("op-4"), attempts: 1 });
  assert.deepEqual(committed("calls"), ["op-1", "op-2", "op-3"]);
  while (!committed("calls").includes("op-4")) await new Promise((resolve) => setTimeout(resolve, 5));

  // In memory (no slot file): a call alone commits at once; while calls overlap they group.
  await memory.beginAttempt(pending("op-5"));
  const memoryAlone = memory.recordCall({ ...record("op-5"), attempts: 1 });
  await Promise.all([memory.beginAttempt(pending("op-6")), memory.beginAttempt(pending("op-7"))]);
  const memoryOverlapped = memory.recordCall({ ...record("op-6"), attempts: 1 });
  const memoryLast = memory.recordCall({ ...record("op-7"), attempts: 1 });
  await Promise.all([memoryAlone, memoryOverlapped, memoryLast]);
  assert.deepEqual(
    (await memory.listCalls("j")).map((c) => c.operationId),
    ["op-5", "op-6", "op-7"],
  );
});

void test("a commit that fails keeps what waits in slots: a revocation meanwhile throws instead of calling a used token unused, and the next commit stores each row once", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-failed-commit-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const store = new SqliteProxyStore({ dataDir, onWriteError: () => undefined });
  t.after(() => store.close());
  // A real SQLite failure, as a full disk gives one, while the slots' pwrites still succeed.
  const other = new Database(path.join(dataDir, "llm-proxy.sqlite"));
  t.after(() => other.close());
  other.exec(
    `CREATE TRIGGER refuse BEFORE INSERT ON session_tokens BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`,
  );
  const token = {
    hash: "h-1",
    job: "j",
    agent: "a",
    session: "s-1",
    budgetUsd: 1,
    maxModelCalls: 0,
    createdAt: new Date(5),
  };
  await store.putToken(token);
  assert.ok(await store.useToken("h-1", new Date(6)), "the first use, in its slot");
  await assert.rejects(
    store.revokeTokens({ session: "s-1" }, new Date(7)),
    /could not commit what waits.*disk is full/,
  );
  await assert.rejects(store.revokeTokens({ session: "s-1" }, new Date(7)), /could not commit/, "still waiting");
  assert.equal((await store.findToken("h-1"))?.usedAt?.getTime(), 6, "what waits is still seen");
  other.exec("DROP TRIGGER refuse");
  const { ended, use } = await store.revokeTokens({ session: "s-1" }, new Date(8));
  assert.deepEqual(
    ended.map((e) => [e.hash, e.usedAt?.getTime()]),
    [["h-1", 6]],
  );
  assert.equal(use, "used");
  assert.deepEqual(other.prepare("SELECT hash, used_at, revoked_at FROM session_tokens").all(), [
    { hash: "h-1", used_at: 6, revoked_at: 8 },
  ]);
});

void test("a store that cannot open its file lets the data directory go: the next open fails for the file again, not for a holder", (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-notadb-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  writeFileSync(
    path.join(dataDir, "llm-proxy.sqlite"),
    "not a database, but long enough to be read as a header.".repeat(4),
  );
  for (let i = 0; i < 2; i++)
    assert.throws(
      () => new SqliteProxyStore({ dataDir }),
      (error: Error) => /not a database/.test(error.message) && !/in use/.test(error.message),
    );
});

void test("the log is copied into the database file after each kind of commit: a secret set, slotted rows committed, a revocation with nothing waiting", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-checkpoints-"));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const store = new SqliteProxyStore({ dataDir });
  t.after(() => store.close());
  // The database file alone (a copy without its log) holds what a checkpoint copied there, and nothing else.
  const inFile = (sql: string): unknown[] => {
    const copy = path.join(dataDir, "copy.sqlite");
    copyFileSync(path.join(dataDir, "llm-proxy.sqlite"), copy);
    try {
      const db = new Database(copy, { readonly: true });
      try {
        return db.prepare(sql).all();
      } finally {
        db.close();
      }
    } catch {
      // Copied in the middle of a checkpoint's writes: read again.
      return [];
    } finally {
      for (const file of [copy, `${copy}-wal`, `${copy}-shm`]) rmSync(file, { force: true });
    }
  };
  const checkpointed = async (sql: string, expected: unknown[]): Promise<void> => {
    while (JSON.stringify(inFile(sql)) !== JSON.stringify(expected))
      await new Promise((resolve) => setTimeout(resolve, 20));
  };
  await store.putSecret(
    { name: "K", iv: Buffer.alloc(12), ciphertext: Buffer.from("x"), tag: Buffer.alloc(16) },
    new Date(1),
  );
  await checkpointed("SELECT name FROM secrets", [{ name: "K" }]);
  await store.putToken({
    hash: "h-1",
    job: "j",
    agent: "a",
    session: "s-1",
    budgetUsd: 0,
    maxModelCalls: 0,
    createdAt: new Date(2),
  });
  await store.listCalls("j");
  await checkpointed("SELECT hash FROM session_tokens", [{ hash: "h-1" }]);
  await store.revokeTokens({ session: "s-1" }, new Date(3));
  await checkpointed("SELECT revoked_at FROM session_tokens", [{ revoked_at: 3 }]);
});

void test("a session's first count and account read what waits in slots, and commit it only when it could change what they read", async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-first-read-"));
  const store = new SqliteProxyStore({ dataDir });
  const reader = new Database(path.join(dataDir, "llm-proxy.sqlite"), { readonly: true });
  t.after(async () => {
    reader.close();
    await store.close();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const tokensCommitted = (): number =>
    (reader.prepare("SELECT count(*) AS n FROM session_tokens").get() as { n: number }).n;
  const token = (hash: string, session: string, budgetSession?: string) => ({
    hash,
    job: "j",
    agent: "a",
    session,
    budgetUsd: 1,
    maxModelCalls: 4,
    ...(budgetSession ? { budgetSession } : {}),
    createdAt: new Date(1),
  });
  // A session's first call: its token and first use wait in slots; neither changes a count or an account.
  await store.putToken(token("h-s", "s"));
  assert.ok(await store.useToken("h-s", new Date(2)));
  (await store.countModelCall({ session: "s", limit: 4 })).end();
  const held = await store.reserveBudget({
    session: "s",
    limitUsd: 1,
    worstCaseUsd: 0.1,
    minimumUsd: 0.01,
    partial: false,
  });
  await held.settle(0);
  assert.equal(tokensCommitted(), 0, "the token and its use still wait in their slots");

  // A call record waiting counts for its session: it is committed before the read.
  await store.beginAttempt(pending("op-1"));
  await store.recordCall({ ...record("op-1"), attempts: 1 });
  await store.forgetModelCalls("s");
  await assert.rejects(store.countModelCall({ session: "s", limit: 1 }), /has made 1 model calls/);
  assert.equal(tokensCommitted(), 1, "committed with the record");

  // A token waiting that spends from another session's budget brings its session's calls to that account.
  await store.putToken(token("h-scratch", "s", "parent"));
  assert.equal(await store.chargedToSession("parent"), 0.01);
  assert.equal(tokensCommitted(), 2);
});
