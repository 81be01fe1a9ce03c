// The job store's checkpoint thread sleeps until a commit comes (issue 24:
// it woke every second to ask the file): the store's statements count each
// commit that changed rows, and only those (an idle poll that claims
// nothing wrote nothing to the log, and must not wake the thread); what the
// store commits still reaches orchestrator.db without SQLite's own
// checkpoint.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import Database from "better-sqlite3";
import { Kysely, SqliteDialect, sql, type Generated } from "kysely";
import { rawEvent } from "@oz0/events-client";
import { cachedStatements } from "../src/store/sqlite-statements.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";

interface Rows {
  rows: { id: Generated<number>; body: string };
}

void test("a commit that changed rows is counted once; one that changed none, or rolled back, is not", async () => {
  const handle = new Database(":memory:");
  handle.exec("CREATE TABLE rows (id INTEGER PRIMARY KEY, body TEXT NOT NULL)");
  let commits = 0;
  const db = new Kysely<Rows>({
    dialect: new SqliteDialect({ database: cachedStatements(handle, () => (commits += 1)) }),
  });
  const counted = async (what: string, expected: number, work: () => Promise<unknown>): Promise<void> => {
    const before = commits;
    await work();
    assert.equal(commits - before, expected, what);
  };
  try {
    await counted("an insert on its own", 1, () => db.insertInto("rows").values({ body: "a" }).execute());
    await counted("a read", 0, () => db.selectFrom("rows").selectAll().execute());
    await counted("an update of no row", 0, () =>
      db.updateTable("rows").set({ body: "b" }).where("id", "=", 99).execute(),
    );
    await counted("a claim (RETURNING) of no row", 0, () =>
      db.updateTable("rows").set({ body: "b" }).where("id", "=", 99).returning("id").execute(),
    );
    await counted("a claim (RETURNING) of a row", 1, () =>
      db.updateTable("rows").set({ body: "c" }).where("id", "=", 1).returning("id").execute(),
    );
    await counted("a delete of no row", 0, () => db.deleteFrom("rows").where("id", "=", 99).execute());
    await counted("a transaction of two inserts", 1, () =>
      db.transaction().execute(async (trx) => {
        await trx.insertInto("rows").values({ body: "d" }).execute();
        assert.equal(commits, 2, "not before the commit");
        await trx.insertInto("rows").values({ body: "e" }).execute();
      }),
    );
    await counted("a transaction that only read", 0, () =>
      db.transaction().execute((trx) => trx.selectFrom("rows").selectAll().execute()),
    );
    await counted("a transaction rolled back", 0, () =>
      db
        .transaction()
        .execute(async (trx) => {
          await trx.insertInto("rows").values({ body: "f" }).execute();
          throw new Error("rolled back");
        })
        .catch(() => undefined),
    );
    await counted("a raw write", 1, () => sql`INSERT INTO rows (body) VALUES ('g')`.execute(db));
    assert.equal((handle.prepare("SELECT count(*) AS n FROM rows").get() as { n: number }).n, 4);
  } finally {
    await db.destroy();
  }
});

void test("what the job store commits reaches orchestrator.db by its checkpoint thread", async (t) => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-commit-count-"));
  t.after(() => rmSync(home, { recursive: true, force: true }));
  const file = path.join(home, "orchestrator.db");
  const store = new SqliteJobStore({ file });
  try {
    // The migrations' writes are checkpointed first: then the file's size holds still until the next.
    let size = -1;
    for (let stable = 0; stable < 3; await new Promise((r) => setTimeout(r, 500)))
      stable = statSync(file).size === size ? stable + 1 : ((size = statSync(file).size), 0);
    await store.putLifecycleEvents(
      Array.from({ length: 20 }, () => rawEvent("job.created", { jobId: "j", attributes: { pad: "x".repeat(2000) } })),
    );
    for (const deadline = Date.now() + 15_000; statSync(file).size <= size; await new Promise((r) => setTimeout(r, 50)))
      if (Date.now() > deadline) throw new Error("waited 15 s for the commit to reach orchestrator.db");
  } finally {
    await store.close();
  }
});
