// SQLite files the orchestrator made before numbered migrations (its schema
// changed ad hoc at each open) open under them without losing anything:
// each fixture is the schema an older SqliteJobStore or SqliteGraphStore
// created, with rows in it, and once adopted the file has the very schema a
// new file gets.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import Database from "better-sqlite3";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { SqliteGraphStore } from "../src/store/sqlite-graph-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { claimedEvents } from "./support/claimed-events.js";

const fixture = (name: string) => readFileSync(new URL(`./fixtures/old-schemas/${name}`, import.meta.url), "utf8");

/** A file made from `sql` the way an older orchestrator left it. */
function oldFile(file: string, sql: string): void {
  const db = new Database(file);
  db.exec(sql);
  db.close();
}

/** Every table's columns and every index, as SQLite describes them (types in any case, columns in any order). */
function schemaOf(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    const tables = db
      .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
      .all() as { name: string }[];
    const columns = tables.flatMap(({ name }) =>
      (db.prepare(`PRAGMA table_info(${name})`).all() as Record<string, unknown>[]).map(
        (c) =>
          `${name}.${String(c.name)} ${String(c.type).toLowerCase()} notnull=${c.notnull} default=${c.dflt_value} pk=${c.pk}`,
      ),
    );
    const indexes = (
      db.prepare("SELECT tbl_name, name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL").all() as {
        tbl_name: string;
        name: string;
      }[]
    ).map((i) => `index ${i.tbl_name}.${i.name}`);
    return [...columns, ...indexes].sort();
  } finally {
    db.close();
  }
}

function migrations(file: string): number[] {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare("SELECT version FROM oz0_migrations ORDER BY version").all() as { version: number }[]).map(
      (r) => r.version,
    );
  } finally {
    db.close();
  }
}

function withDir(fn: (dir: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-old-schema-"));
    try {
      await fn(dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
}

async function freshJobsSchema(dir: string): Promise<string[]> {
  const file = path.join(dir, "fresh.db");
  await new SqliteJobStore({ file }).close();
  return schemaOf(file);
}

void test(
  "sqlite: orchestrator.db from before served tools is migrated forward: its job, events, approval and operations kept, the newer columns at their defaults",
  withDir(async (dir) => {
    const file = path.join(dir, "orchestrator.db");
    oldFile(file, fixture("sqlite-jobs-before-served-tools.sql"));
    const store = new SqliteJobStore({ file });
    try {
      const job = await store.getJob("job_old");
      assert.equal(job?.state, "waiting");
      assert.equal(job?.servedTools, "");
      assert.equal(job?.startedBy, "");
      assert.equal(job?.startedAt, undefined);
      assert.equal(job?.traceId, undefined);
      assert.deepEqual(job?.attachments, ["a.txt"]);
      assert.equal(job?.createdAt.getTime(), 1764547201000);
      assert.equal(job?.sandboxSeq, 5);
      const texts = (await store.listJobEvents("job_old", 0)).map((e) =>
        e.event.case === "text" ? e.event.value.text : "",
      );
      assert.deepEqual(texts, ["looking", "found it"]);
      const permission = await store.getPermission("job_old", "call_1");
      assert.equal(permission?.id, "perm_1");
      assert.equal(permission?.needsPerson, true);
      assert.deepEqual(permission?.input, { command: "npm test" });
      assert.deepEqual((await store.getOperationCheckpoint("job_old", "call_0"))?.result, { ok: true });
      assert.equal((await store.getAgentVersion("fixer"))?.harness.manifest.name, "fake");
      assert.equal((await store.getPlugin("example"))?.installedAt.getTime(), 1764547200000);
      // The tables it did not have yet work too.
      const [stored] = await store.append({
        jobId: "job_old",
        events: [create(JobEventSchema, { event: { case: "text", value: { text: "after" } } })],
        job: { servedTools: "graph-manager", state: "running" },
        stderr: { sessionId: "ses_old", piece: { seq: 6, text: "warn\n", droppedBytes: 0 }, maxBytes: 1024 },
      });
      assert.equal(stored?.seq, 3n);
      assert.equal((await store.getJob("job_old"))?.servedTools, "graph-manager");
      assert.deepEqual(await store.listStderrPieces("job_old", "ses_old", 0), [
        { seq: 6, text: "warn\n", droppedBytes: 0 },
      ]);
    } finally {
      await store.close();
    }
    assert.deepEqual(
      migrations(file),
      [1, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19],
      "everything recorded, whether adopted or run",
    );
    assert.deepEqual(schemaOf(file), await freshJobsSchema(dir), "the schema a new file gets");
  }),
);

void test(
  "sqlite: orchestrator.db from just before numbered migrations is adopted as it is: nothing lost, nothing run but the index it lacked and the migrations made since",
  withDir(async (dir) => {
    const file = path.join(dir, "orchestrator.db");
    oldFile(file, fixture("sqlite-jobs-before-migrations.sql"));
    const store = new SqliteJobStore({ file });
    try {
      const job = await store.getJob("job_old");
      assert.equal(job?.servedTools, "graph-manager");
      assert.equal(job?.startedBy, "alice");
      assert.equal(job?.startedAt?.getTime(), 1764547201200);
      assert.equal(job?.finishedAt?.getTime(), 1764547203000);
      assert.equal(job?.traceId, "0af7651916cd43dd8448eb211c80319c");
      assert.equal((await store.listJobs({ text: "FIX" }))[0]?.id, "job_old");
      const permission = await store.getPermission("job_old", "perm_1");
      assert.equal(permission?.status, "approved");
      assert.equal(permission?.answeredBy, "bob");
      assert.equal(permission?.delivered, true);
      assert.equal(permission?.runtimeCall, undefined, "used by no runtime call (migration 15's default)");
      assert.deepEqual(
        await store.claimSessionTokensToRevoke({ limit: 10, claimMs: 60_000 }),
        ["tok_1"],
        "the ended job's token, whose revoke was never recorded, is revoked again by the next sweep (migration 16)",
      );
      assert.deepEqual(await store.listStderrSessions("job_old"), [
        { sessionId: "ses_old", keptBytes: 5, droppedBytes: 2, trailingDroppedBytes: 0 },
      ]);
      assert.deepEqual(await store.listStderrPieces("job_old", "ses_old", 0), [
        { seq: 3, text: "oops\n", droppedBytes: 2 },
      ]);
      const claimed = claimedEvents(await store.claimLifecycleEvents({ limit: 10, claimMs: 60_000 }));
      assert.deepEqual(
        claimed.map((c) => c.event.type),
        ["job.completed"],
      );
    } finally {
      await store.close();
    }
    assert.deepEqual(migrations(file), [1, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19]);
    assert.deepEqual(schemaOf(file), await freshJobsSchema(dir));
    // Opened again: nothing more to do.
    await new SqliteJobStore({ file }).close();
    assert.deepEqual(migrations(file), [1, 5, 7, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19]);
  }),
);

void test(
  "sqlite: graphs.db from before numbered migrations keeps its graph versions, graph jobs and step jobs under the tables' shared names",
  withDir(async (dir) => {
    const fresh = path.join(dir, "fresh");
    await SqliteGraphStore.open(fresh).close();
    oldFile(path.join(dir, "graphs.db"), fixture("sqlite-graphs-before-migrations.sql"));
    const store = SqliteGraphStore.open(dir);
    try {
      const version = await store.getVersion("support");
      assert.equal(version?.version, 1);
      assert.equal(
        JSON.stringify(version?.definition),
        '{"name":"support","zeta":1,"alpha":2}',
        "key order as written",
      );
      assert.equal(version?.publishedAt.getTime(), 1764547200000);
      assert.deepEqual((await store.getGraphJob("job_graph"))?.pinnedAgents, { fixer: 1 });
      assert.equal(await store.getStepJob("job_graph/triage"), "job_step");
      assert.deepEqual(await store.listStepJobs("job_graph"), [
        { idempotencyKey: "job_graph/triage", runId: "job_graph", stepJobId: "job_step" },
      ]);
      assert.equal((await store.publishVersion({ ...version!, contentHash: "g2" })).record.version, 2);
    } finally {
      await store.close();
    }
    assert.deepEqual(migrations(path.join(dir, "graphs.db")), [6, 12]);
    assert.deepEqual(schemaOf(path.join(dir, "graphs.db")), schemaOf(path.join(fresh, "graphs.db")));
  }),
);
