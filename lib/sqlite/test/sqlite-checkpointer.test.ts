// The WAL is copied into the database file by the checkpointer's thread, and
// the writer's commits never run a checkpoint (wal_autocheckpoint = 0): a
// commit's time no longer includes a checkpoint's fsync now and then.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { SqliteCheckpointer } from "@oz0/sqlite";

function walFile(t: { after: (fn: () => void) => void }): { file: string; db: Database.Database } {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-checkpointer-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, "store.db");
  const db = new Database(file);
  db.pragma("journal_mode = WAL");
  db.pragma("wal_autocheckpoint = 0");
  db.exec("CREATE TABLE rows (id INTEGER PRIMARY KEY, body TEXT)");
  return { file, db };
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (const deadline = Date.now() + 15_000; !check(); await new Promise((r) => setTimeout(r, 20)))
    if (Date.now() > deadline) throw new Error(`waited 15 s: ${what}`);
}

const insertRows = (db: Database.Database, count: number): void => {
  const insert = db.prepare("INSERT INTO rows (body) VALUES (?)");
  for (let i = 0; i < count; i++) insert.run("x".repeat(2000));
};

for (const trigger of ["polled", "counted"] as const) {
  void test(`${trigger}: a few commits reach the database file by the thread, long before 1,000 pages of log`, async (t) => {
    const { file, db } = walFile(t);
    const errors: unknown[] = [];
    const checkpointer = new SqliteCheckpointer({ file, trigger, intervalMs: 50, onError: (e) => errors.push(e) });
    try {
      const before = statSync(file).size;
      // 20 commits of about one page each: SQLite's own checkpoint would wait for 1,000 pages.
      for (let i = 0; i < 20; i++) {
        insertRows(db, 1);
        checkpointer.wrote();
      }
      await until(() => statSync(file).size > before + 20 * 2000, "the rows copied into the database file");
      assert.deepEqual(errors, []);
    } finally {
      await checkpointer.close();
      db.close();
    }
  });
}

void test("polled: closing checkpoints what was written last", async (t) => {
  const { file, db } = walFile(t);
  const checkpointer = new SqliteCheckpointer({
    file,
    trigger: "polled",
    intervalMs: 50,
    onError: (error) => assert.fail(String(error)),
  });
  await new Promise((r) => setTimeout(r, 200));
  const idle = statSync(file).size;
  // Written, and closed at once: the thread's last checkpoint on close copies it.
  insertRows(db, 10);
  await checkpointer.close();
  assert.ok(statSync(file).size > idle + 10 * 2000, "close copied the last rows in");
  assert.equal((db.prepare("SELECT count(*) AS n FROM rows").get() as { n: number }).n, 10);
  db.close();
});

void test("counted: a thread asleep with no commit to copy is woken by the next commit, and checkpoints it", async (t) => {
  const { file, db } = walFile(t);
  const errors: unknown[] = [];
  const checkpointer = new SqliteCheckpointer({ file, intervalMs: 50, onError: (e) => errors.push(e) });
  try {
    // Commits while the thread starts, then checkpointed: the thread goes back to sleep on the count.
    insertRows(db, 2);
    checkpointer.wrote();
    checkpointer.wrote();
    const first = statSync(file).size;
    await until(() => statSync(file).size > first, "the first rows copied into the database file");
    for (let round = 0; round < 3; round++) {
      // Asleep for several intervals: no commit to wake it.
      await new Promise((r) => setTimeout(r, 300));
      const before = statSync(file).size;
      insertRows(db, 3);
      checkpointer.wrote();
      // The file grows only by a checkpoint: the rows fill at least a page of their own.
      await until(() => statSync(file).size > before, `round ${round}'s rows copied after a sleep`);
    }
    assert.deepEqual(errors, []);
  } finally {
    await checkpointer.close();
    db.close();
  }
});
