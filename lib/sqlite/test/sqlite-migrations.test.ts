// runSqliteMigrations on real files: what runs, what is recorded, files from
// before numbered migrations adopted, components apart, a failure undoing
// the whole run, and two processes opening one new file at once.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { test } from "node:test";
import Database from "better-sqlite3";
import { runSqliteMigrations, type SqliteMigration } from "../src/migrations.js";

const MIGRATIONS: SqliteMigration[] = [
  {
    version: 1,
    name: "jobs",
    sql: "CREATE TABLE jobs (id TEXT PRIMARY KEY);",
    present: (p) => p.hasTable("jobs"),
  },
  {
    version: 2,
    name: "job owner",
    sql: "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';",
    present: (p) => p.hasColumn("jobs", "owner"),
  },
  {
    version: 3,
    name: "job events",
    sql: "CREATE TABLE job_events (job_id TEXT, seq INTEGER); CREATE INDEX e ON job_events (job_id);",
  },
];

function recorded(db: Database.Database, component: string): number[] {
  return (
    db.prepare("SELECT version FROM oz0_migrations WHERE component = ? ORDER BY version").all(component) as {
      version: number;
    }[]
  ).map((r) => r.version);
}

function columns(db: Database.Database, table: string): string[] {
  return (db.prepare("SELECT name FROM pragma_table_info(?)").all(table) as { name: string }[]).map((c) => c.name);
}

void test("a new file gets every migration, once; one appended later runs alone", () => {
  const db = new Database(":memory:");
  assert.deepEqual(runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS.slice(0, 2) }), [1, 2]);
  assert.deepEqual(runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS.slice(0, 2) }), []);
  assert.deepEqual(runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS }), [3]);
  assert.deepEqual(recorded(db, "orchestrator"), [1, 2, 3]);
  assert.deepEqual(columns(db, "jobs"), ["id", "owner"]);
});

void test("a file from before numbered migrations: what it has is recorded, not run; the rest runs", () => {
  const db = new Database(":memory:");
  db.exec("CREATE TABLE jobs (id TEXT PRIMARY KEY, owner TEXT NOT NULL DEFAULT '')");
  db.prepare("INSERT INTO jobs (id, owner) VALUES ('j1', 'ana')").run();
  assert.deepEqual(runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS }), [3]);
  assert.deepEqual(recorded(db, "orchestrator"), [1, 2, 3]);
  assert.deepEqual(db.prepare("SELECT id, owner FROM jobs").all(), [{ id: "j1", owner: "ana" }]);

  // Half-way: the table without the later column gets the column.
  const older = new Database(":memory:");
  older.exec("CREATE TABLE jobs (id TEXT PRIMARY KEY)");
  assert.deepEqual(runSqliteMigrations({ db: older, component: "orchestrator", migrations: MIGRATIONS }), [2, 3]);
  assert.deepEqual(columns(older, "jobs"), ["id", "owner"]);
});

void test("components sharing a file keep their own versions", () => {
  const db = new Database(":memory:");
  runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS.slice(0, 1) });
  const proxy: SqliteMigration[] = [{ version: 1, name: "calls", sql: "CREATE TABLE calls (id TEXT PRIMARY KEY);" }];
  // Its version 1 is not the orchestrator's, and a file with the orchestrator's tables is not one to adopt.
  assert.deepEqual(runSqliteMigrations({ db, component: "llm-proxy", migrations: proxy }), [1]);
  assert.deepEqual(recorded(db, "orchestrator"), [1]);
  assert.deepEqual(recorded(db, "llm-proxy"), [1]);
});

void test("a migration that fails undoes the whole run: nothing half-made, nothing recorded", () => {
  const db = new Database(":memory:");
  const broken: SqliteMigration = {
    version: 4,
    name: "broken",
    sql: "CREATE TABLE later (x); SELECT * FROM no_such_table;",
  };
  assert.throws(
    () => runSqliteMigrations({ db, component: "orchestrator", migrations: [...MIGRATIONS, broken] }),
    /no such table: no_such_table/,
  );
  assert.equal(
    db.prepare("SELECT 1 FROM sqlite_master WHERE name IN ('jobs', 'later', 'oz0_migrations')").get(),
    undefined,
  );
  assert.deepEqual(runSqliteMigrations({ db, component: "orchestrator", migrations: MIGRATIONS }), [1, 2, 3]);
});

void test("two processes opening one new file at once: each migration runs once", async () => {
  const dir = mkdtempSync(path.join(tmpdir(), "oz0-sqlite-migrations-"));
  const file = path.join(dir, "shared.sqlite");
  const source = path.join(import.meta.dirname, "..", "src", "migrations.ts");
  // Each process waits for the other's IMMEDIATE transaction (busy_timeout), then finds the versions recorded.
  const program = `
    import Database from "better-sqlite3";
    import { runSqliteMigrations } from ${JSON.stringify(source)};
    const db = new Database(${JSON.stringify(file)});
    db.pragma("busy_timeout = 10000");
    const migrations = ${JSON.stringify(MIGRATIONS.map(({ version, name, sql }) => ({ version, name, sql })))};
    console.log(JSON.stringify(runSqliteMigrations({ db, component: "orchestrator", migrations })));
  `;
  try {
    const run = () =>
      promisify(execFile)(process.execPath, ["--import", "tsx", "--input-type=module", "-e", program], {
        cwd: import.meta.dirname,
      });
    const outputs = (await Promise.all([run(), run()])).map((r) => JSON.parse(r.stdout) as number[]);
    assert.deepEqual(outputs.flat().sort(), [1, 2, 3], `each ran once: ${JSON.stringify(outputs)}`);
    const db = new Database(file);
    assert.deepEqual(recorded(db, "orchestrator"), [1, 2, 3]);
    db.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
