// needs: postgres
// A PostgreSQL schema the orchestrator migrated before its migrations were
// shared with SQLite (postgres-migrations.ts, versions 1-11 as raw SQL)
// stays what it was: the shared migrations find every version recorded,
// every row reads back through the stores, and a new schema built from the
// shared migrations has the very tables, columns and indexes the old SQL made.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import type pg from "pg";
import { openGraphStore } from "../src/store/graph-store.js";
import { migrateOrchestrator, ORCHESTRATOR_MIGRATIONS } from "../src/store/migrations.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { createPostgresPool } from "../src/store/sql-database.js";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";

const connectionString = databaseUrl();
const oldSchemaSql = readFileSync(
  new URL("./fixtures/old-schemas/postgres-before-shared-migrations.sql", import.meta.url),
  "utf8",
);

/** A schema as the old migrations left it, with the fixture's rows. */
async function oldSchema(schema: string): Promise<void> {
  const pool = createPostgresPool({ connectionString, schema: "public", maxConnections: 1 });
  try {
    await pool.query(`CREATE SCHEMA ${schema}`);
    await pool.query(`SET search_path TO ${schema}; ${oldSchemaSql}`);
  } finally {
    await pool.end();
  }
}

/** Columns (type, nullability, default) and indexes of every table in `schema`, named without the schema. */
async function describe(pool: pg.Pool, schema: string): Promise<string[]> {
  const columns = await pool.query<{ line: string }>(
    `SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS line
     FROM information_schema.columns WHERE table_schema = $1 AND table_name <> 'oz0_migrations'`,
    [schema],
  );
  const indexes = await pool.query<{ line: string }>(
    "SELECT indexdef AS line FROM pg_indexes WHERE schemaname = $1 AND tablename <> 'oz0_migrations'",
    [schema],
  );
  return [...columns.rows, ...indexes.rows].map((r) => r.line.replaceAll(`${schema}.`, "")).sort();
}

void test("postgres: a schema the old migrations made is migrated forward with nothing lost", async () => {
  const schema = freshSchema();
  await oldSchema(schema);
  const pool = createPostgresPool({ connectionString, schema, maxConnections: 2 });
  const store = await PostgresJobStore.open({ connectionString, schema, maxConnections: 2 });
  try {
    assert.deepEqual(await migrateOrchestrator(pool, schema), [], "versions 1-11 are the old ones, already recorded");
    assert.equal((await store.getJob("job_old"))?.traceparent, undefined, "an old job has no traceparent");
    const job = await store.getJob("job_old");
    assert.equal(job?.servedTools, "graph-manager");
    assert.equal(job?.startedAt?.toISOString(), "2025-12-01T00:00:01.200Z");
    assert.deepEqual(job?.attachments, ["a.txt"]);
    assert.equal(job?.sandboxSeq, 7);
    const texts = (await store.listJobEvents("job_old", 0)).map((e) =>
      e.event.case === "text" ? e.event.value.text : "",
    );
    assert.deepEqual(texts, ["looking", "found it"]);
    assert.equal((await store.getPermission("job_old", "call_1"))?.answeredBy, "bob");
    assert.deepEqual((await store.getOperationCheckpoint("job_old", "call_0"))?.result, { ok: true });
    assert.equal((await store.getAgentVersion("fixer"))?.version, 1);
    assert.deepEqual(await store.listStderrPieces("job_old", "ses_old", 0), [
      { seq: 3, text: "oops\n", droppedBytes: 2 },
    ]);
    const [stored] = await store.append({
      jobId: "job_old",
      events: [create(JobEventSchema, { event: { case: "text", value: { text: "after" } } })],
    });
    assert.equal(stored?.seq, 3n);
    assert.equal(
      (await store.publishAgentVersion({ ...(await store.getAgentVersion("fixer"))!, contentHash: "h2" })).record
        .version,
      2,
    );

    const graphs = await openGraphStore({ pool: store.pool, home: "/nonexistent" });
    const version = await graphs.getVersion("support");
    assert.equal(JSON.stringify(version?.definition), '{"name":"support","zeta":1,"alpha":2}');
    assert.deepEqual((await graphs.getGraphJob("job_graph"))?.pinnedAgents, { fixer: 1 });
    assert.equal(await graphs.getStepJob("job_graph/triage"), "job_step");
    await graphs.close();
  } finally {
    await store.close();
    await pool.end();
    await dropSchema(schema);
  }
});

void test("postgres: the shared migrations build the schema the old SQL built, table for table and index for index", async () => {
  const before = freshSchema();
  const after = freshSchema();
  await oldSchema(before);
  const pool = createPostgresPool({ connectionString, schema: after, maxConnections: 2 });
  try {
    assert.deepEqual(
      await migrateOrchestrator(pool, after),
      ORCHESTRATOR_MIGRATIONS.map((m) => m.version),
    );
    const old = await describe(pool, before);
    assert.ok(old.length > 100, "the old schema is there to compare with");
    // Less what came after the old SQL: the job's traceparent (version 14), the runtime call that used a
    // permission (version 15), the session tokens to revoke (versions 16 and 17), who changed a permission's
    // input (version 18), the rule a job's session broke (version 19), the pod a sandbox node was registered by and
    // when its token was issued (versions 20 and 21).
    const newer = (line: string): boolean =>
      line.startsWith("sandbox_nodes.pod_") ||
      line.startsWith("jobs.traceparent ") ||
      line.startsWith("jobs.rule_broken ") ||
      line.startsWith("permissions.runtime_call ") ||
      line.startsWith("permissions.input_changed_by ") ||
      /\bsession_tokens[ .]/.test(line);
    const built = await describe(pool, after);
    assert.deepEqual(built.filter(newer), [
      "CREATE UNIQUE INDEX session_tokens_pkey ON session_tokens USING btree (token_id)",
      "jobs.rule_broken text NO ''::text",
      "jobs.traceparent text NO ''::text",
      "permissions.input_changed_by text NO ''::text",
      "permissions.runtime_call text NO ''::text",
      "sandbox_nodes.pod_issued_at bigint NO 0",
      "sandbox_nodes.pod_uid text NO ''::text",
      "session_tokens.claimed_until timestamp with time zone YES ",
      "session_tokens.job_id text NO ",
      "session_tokens.revoke_asked boolean NO ",
      "session_tokens.token_id text NO ",
    ]);
    assert.deepEqual(
      built.filter((line) => !newer(line)),
      old,
    );
  } finally {
    await pool.end();
    await dropSchema(before);
    await dropSchema(after);
  }
});
