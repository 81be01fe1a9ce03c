// SQLite files the proxy made before numbered migrations (its schema made by
// CREATE TABLE IF NOT EXISTS and ALTERs at each open) open under them
// without losing anything: each fixture is the schema an older
// SqliteProxyStore created, with rows in it. Once adopted the file has the
// columns, keys and indexes a new file gets; a file made before the hot
// tables were WITHOUT ROWID keeps its rowid tables (every statement is the
// same on both).
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";

const fixture = (name: string) => readFileSync(new URL(`./fixtures/old-schemas/${name}`, import.meta.url), "utf8");

function tempDir(): string {
  return mkdtempSync(path.join(os.tmpdir(), "oz0-llm-proxy-upgrade-"));
}

/** A data directory whose file an older proxy made from `sql`. */
function oldDataDir(sql: string): string {
  const dataDir = tempDir();
  const db = new Database(path.join(dataDir, "llm-proxy.sqlite"));
  db.exec(sql);
  db.close();
  return dataDir;
}

function withFile<T>(dataDir: string, read: (db: Database.Database) => T): T {
  const db = new Database(path.join(dataDir, "llm-proxy.sqlite"), { readonly: true });
  try {
    return read(db);
  } finally {
    db.close();
  }
}

/**
 * A key column of a WITHOUT ROWID table is NOT NULL by definition, and on a
 * rowid table SQLite lets one be NULL unless declared so; no statement
 * writes a NULL key, so the two count as the same.
 */
const keyOrNotNull = (c: Record<string, unknown>): number => (c.notnull || c.pk ? 1 : 0);

/** Every table's columns and keys and every index, as SQLite describes them. */
function schemaOf(dataDir: string): string[] {
  return withFile(dataDir, (db) => {
    const tables = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .all() as { name: string }[];
    const columns = tables.flatMap(({ name }) =>
      (db.prepare(`PRAGMA table_info(${name})`).all() as Record<string, unknown>[]).map(
        (c) =>
          `${name}.${String(c.name)} ${String(c.type).toLowerCase()} notnull=${keyOrNotNull(c)} default=${c.dflt_value} pk=${c.pk}`,
      ),
    );
    const indexes = (
      db.prepare("SELECT tbl_name, name, sql FROM sqlite_master WHERE type = 'index'").all() as {
        tbl_name: string;
        name: string;
        sql: string | null;
      }[]
    )
      // A key's own index is named by SQLite (sqlite_autoindex_…) and exists only on a rowid table.
      .filter((i) => i.sql !== null)
      .map((i) => `index ${i.tbl_name}.${i.name}`);
    return [...columns, ...indexes].sort();
  });
}

function withoutRowid(dataDir: string): string[] {
  return withFile(dataDir, (db) =>
    (
      db.prepare("SELECT name, sql FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as {
        name: string;
        sql: string;
      }[]
    )
      .filter((t) => /without rowid\s*$/i.test(t.sql))
      .map((t) => t.name),
  );
}

function migrations(dataDir: string): number[] {
  return withFile(dataDir, (db) =>
    (db.prepare("SELECT version FROM oz0_migrations ORDER BY version").all() as { version: number }[]).map(
      (r) => r.version,
    ),
  );
}

async function newFileSchema(): Promise<{ schema: string[]; withoutRowid: string[] }> {
  const dataDir = tempDir();
  try {
    await new SqliteProxyStore({ dataDir }).close();
    return { schema: schemaOf(dataDir), withoutRowid: withoutRowid(dataDir) };
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const cases = [
  // Its calls in flight are kept in a table made now.
  { fixture: "sqlite-before-first-use.sql", tokenUsedAt: 1000, inFlight: false, hotTables: ["pending_calls"] },
  { fixture: "sqlite-before-without-rowid.sql", tokenUsedAt: 1500, inFlight: true, hotTables: [] as string[] },
  {
    fixture: "sqlite-before-migrations.sql",
    tokenUsedAt: 1500,
    inFlight: true,
    hotTables: ["attempts", "calls", "pending_calls"],
  },
];

for (const c of cases) {
  void test(`sqlite: a file from ${c.fixture} is adopted, keeps every row, and ends with a new file's schema`, async (t) => {
    const dataDir = oldDataDir(fixture(c.fixture));
    t.after(() => rmSync(dataDir, { recursive: true, force: true }));
    const store = new SqliteProxyStore({ dataDir });
    try {
      const secret = await store.getSecret("anthropic");
      assert.deepEqual(secret?.ciphertext, Buffer.from("cafe", "hex"));
      assert.equal(secret?.iv.length, 12);
      assert.equal(secret?.updatedAt.getTime(), 600);
      const token = await store.findToken("h-old");
      assert.equal(token?.session, "ses-old");
      // A file from before tokens recorded their use counts them used as of their creation (it claims nothing false).
      assert.equal(token?.usedAt?.getTime(), c.tokenUsedAt);
      // Minted before tokens carried a limit of model calls: it has none.
      assert.equal(token?.maxModelCalls, 0);
      const [call] = await store.listCalls("job-old");
      assert.equal(call?.operationId, "op-old");
      assert.deepEqual(call?.usage, { input: 10, output: 5, cacheRead: 1, cacheWrite: 2, reasoning: 0 });
      assert.equal(call?.ttftMs, 30);
      assert.equal((await store.listAttempts("job-old")).length, 1);
      assert.equal((await store.usageByAgent("job-old")).get("agent-old")?.costUsd, 0.25);
      assert.equal(await store.chargedToSession("ses-old"), 0.25);
      // The dead process's call in flight is reconciled as interrupted.
      const interrupted = await store.reconcileInterrupted();
      assert.deepEqual(
        interrupted.map((r) => [r.operationId, r.outcome, r.attempts]),
        c.inFlight ? [["op-dead", "interrupted", 2]] : [],
      );
      // And it takes new rows in every table.
      await store.beginAttempt({
        operationId: "op-new",
        job: "job-old",
        agent: "agent-old",
        session: "ses-old",
        provider: "anthropic",
        model: "claude",
        wire: "anthropic",
        stream: false,
        attempt: 1,
        startedAt: new Date(3000),
        attemptStartedAt: new Date(3000),
      });
      await store.recordCall({ ...call!, operationId: "op-new", startedAt: new Date(3000) });
      assert.deepEqual(
        (await store.listCalls("job-old")).map((r) => r.operationId),
        c.inFlight ? ["op-old", "op-dead", "op-new"] : ["op-old", "op-new"],
      );
      assert.equal((await store.revokeTokens({ session: "ses-old" }, new Date(4000))).use, "used");
    } finally {
      await store.close();
    }
    assert.deepEqual(migrations(dataDir), [1, 3, 4, 5, 7, 8, 9], "every SQLite migration recorded");
    const fresh = await newFileSchema();
    assert.deepEqual(schemaOf(dataDir), fresh.schema);
    assert.deepEqual(fresh.withoutRowid, ["attempts", "calls", "pending_calls"]);
    assert.deepEqual(withoutRowid(dataDir), c.hotTables, "an adopted file keeps its tables as they were");
    // Opening it again runs nothing.
    const again = new SqliteProxyStore({ dataDir });
    await again.close();
    assert.deepEqual(migrations(dataDir), [1, 3, 4, 5, 7, 8, 9]);
  });
}
