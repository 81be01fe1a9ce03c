// The job store's hot queries, compiled once per engine and shape
// (compiled-once.ts), give the very SQL and parameters Kysely's builder
// gives for the same call, on both engines; the store suites run them
// against real databases.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import pg from "pg";
import { compiledOnce, type CompiledOnce } from "../src/store/compiled-once.js";
import {
  openSqlite,
  postgresDb,
  POSTGRES,
  SQLITE,
  type Db,
  type JobsTable,
  type PermissionsTable,
  type SqlEngine,
  type Time,
} from "../src/store/sql-database.js";
import { HOT_QUERIES } from "../src/store/sql-job-store.js";
import { VERSION_QUERIES } from "../src/store/versions.js";
import { newJobRecord } from "../src/store/job-store.js";
import { jobColumns } from "../src/store/sql-rows.js";

// Compiling needs no connection: a pool that is never used, and a SQLite file in memory.
const pool = new pg.Pool();
const ENGINES: { engine: SqlEngine; db: Db }[] = [
  { engine: SQLITE, db: openSqlite({ file: ":memory:", synchronous: "NORMAL", migrate: () => {} }).db },
  { engine: POSTGRES, db: postgresDb(pool) },
];
after(() => pool.end());

const at = (engine: SqlEngine, ms: number) => engine.time(new Date(ms));

/** Calls of each hot query as the store makes them, two of each shape (the second runs the SQL compiled first). */
function calls(engine: SqlEngine): Record<keyof typeof HOT_QUERIES, unknown[]> {
  const jobRow = (id: string, finishedAt?: Date): JobsTable =>
    jobColumns(engine, {
      ...newJobRecord(
        {
          id,
          agentName: "fixer",
          agentVersion: 1,
          input: "fix it",
          state: "pending",
          sessionId: `ses_${id}`,
          attachments: [],
          servedTools: "",
          startedBy: "",
        },
        new Date(1),
      ),
      ...(finishedAt ? { finishedAt } : {}),
    });
  const permissionRow = (id: string, answeredAt: Time | null): PermissionsTable => ({
    job_id: "job-1",
    id,
    call_id: `call-${id}`,
    session_id: "ses-1",
    tool: "run_command",
    input: '{"command":"ls"}',
    title: "run ls",
    needs_person: engine.bool(false),
    status: answeredAt ? "approved" : "pending",
    reason: "",
    decider: answeredAt ? "policy" : null,
    answered_by: "",
    answer_input: null,
    input_changed_by: "",
    requested_at: at(engine, 2),
    answered_at: answeredAt,
    delivered: engine.bool(false),
    runtime_call: "",
  });
  const event = (jobId: string, seq: number) => ({
    job_id: jobId,
    seq,
    time: at(engine, 1_000 + seq),
    event: `{"seq":"${seq}"}`,
  });
  return {
    createJob: [jobRow("job-1"), jobRow("job-2"), jobRow("job-3", new Date(9))].map((row) => ({
      row,
    })),
    getJob: [{ id: "job-1" }, { id: "job-2" }],
    updateJobReturning: [
      { id: "job-1", columns: { sandbox_seq: 3, updated_at: at(engine, 5) } },
      { id: "job-2", columns: { sandbox_seq: 9, updated_at: at(engine, 6) } },
      { id: "job-1", columns: { state: "failed", finished_at: at(engine, 7), error: "x", updated_at: at(engine, 7) } },
      { id: "job-1", columns: { finished_at: null, updated_at: at(engine, 8) } },
    ],
    numberEvents: [
      { id: "job-1", count: 1, columns: { updated_at: at(engine, 1), sandbox_seq: 2 } },
      { id: "job-3", count: 3, columns: { updated_at: at(engine, 2), sandbox_seq: 5 } },
      {
        id: "job-1",
        count: 0,
        columns: { updated_at: at(engine, 3), attachments: '["a"]', cancel_requested_at: null },
      },
    ],
    insertJobEvents: [
      { rows: [event("job-1", 1)] },
      { rows: [event("job-2", 7)] },
      { rows: [event("job-1", 2), event("job-1", 3), event("job-1", 4)] },
    ],
    listJobEvents: [
      { jobId: "job-1", afterSeq: 0, limit: 1000 },
      { jobId: "job-2", afterSeq: 12, limit: 5 },
    ],
    keepLifecycle: [{ events: ["{}"] }, { events: ['{"a":1}', '{"b":2}'] }, { events: ['{"c":3}', '{"d":4}'] }],
    claimUnclaimedLifecycle: [
      { now: at(engine, 10), until: at(engine, 15), limit: 100 },
      { now: at(engine, 20), until: at(engine, 25), limit: 7 },
    ],
    claimLifecycle: [
      { seqs: [1, 2], until: at(engine, 30) },
      { seqs: [5, 6], until: at(engine, 40) },
      { seqs: [5, 6], until: null },
      { seqs: [9], until: null },
    ],
    deleteLifecycle: [{ seqs: [1] }, { seqs: [2] }, { seqs: [3, 4, 5] }],
    upsertPermission: [permissionRow("perm-1", null), permissionRow("perm-2", at(engine, 4))].map((row) => ({ row })),
    listPermissions: [
      { jobId: "job-1" },
      { jobId: "job-2" },
      { needsPerson: engine.bool(true), pending: "pending" },
      { delivered: engine.bool(false) },
      {},
    ],
    markPermissionDelivered: [
      { jobId: "job-1", id: "perm-1", delivered: engine.bool(true) },
      { jobId: "job-2", id: "perm-2", delivered: engine.bool(true) },
    ],
    usePermissionForRuntimeCall: [
      { jobId: "job-1", id: "perm-1", callId: "rt-1", none: "" },
      { jobId: "job-2", id: "perm-2", callId: "rt-2", none: "" },
    ],
    runtimeCallPermits: [
      { jobId: "job-1", tool: "run_command", callId: "rt-1", none: "", limit: 64 },
      { jobId: "job-2", tool: "verify", callId: "rt-2", none: "", limit: 3 },
    ],
  };
}

for (const { engine, db } of ENGINES) {
  void test(`${engine.name}: each hot query compiled once gives the builder's SQL and parameters, call after call`, () => {
    const versionCalls = [{ name: "fixer" }, { name: "fixer", version: 2 }, { name: "other", version: 3 }];
    const queries: [string, CompiledOnce<unknown, unknown>, unknown[]][] = [
      ...Object.entries(calls(engine)).map(([name, values]): [string, CompiledOnce<unknown, unknown>, unknown[]] => [
        name,
        HOT_QUERIES[name as keyof typeof HOT_QUERIES] as CompiledOnce<unknown, unknown>,
        values,
      ]),
      ...Object.entries(VERSION_QUERIES).map(([table, query]): [string, CompiledOnce<unknown, unknown>, unknown[]] => [
        table,
        query as CompiledOnce<unknown, unknown>,
        versionCalls,
      ]),
    ];
    for (const [name, query, values] of queries) {
      for (const value of values) {
        const once = query.compile(db, engine, value);
        const built = query.built(db, engine, value);
        assert.equal(once.sql, built.sql, `${name}: the SQL`);
        assert.deepEqual(once.parameters, built.parameters, `${name}: the parameters, in order`);
      }
    }
  });
}

void test("the SQL of the hottest queries, as the store ran them (SQLite and PostgreSQL)", () => {
  const [sqlite, postgres] = ENGINES;
  const columns = { updated_at: 1, sandbox_seq: 2 };
  assert.equal(
    HOT_QUERIES.numberEvents.compile(sqlite!.db, SQLITE, { id: "j", count: 2, columns }).sql,
    'update "jobs" set "last_seq" = last_seq + ?, "updated_at" = ?, "sandbox_seq" = ? where "id" = ? returning "last_seq"',
  );
  assert.equal(
    HOT_QUERIES.numberEvents.compile(postgres!.db, POSTGRES, { id: "j", count: 2, columns }).sql,
    'update "jobs" set "last_seq" = last_seq + $1, "updated_at" = $2, "sandbox_seq" = $3 where "id" = $4 returning "last_seq"',
  );
  assert.equal(
    HOT_QUERIES.insertJobEvents.compile(postgres!.db, POSTGRES, {
      rows: [1, 2].map((seq) => ({ job_id: "j", seq, time: new Date(0), event: "{}" })),
    }).sql,
    'insert into "job_events" ("job_id", "seq", "time", "event") values ($1, $2, $3, $4), ($5, $6, $7, $8)',
  );
});

void test("a query compiled once is compiled once per shape, and each call gets its own values", () => {
  let builds = 0;
  const query = compiledOnce((db, v: { ids: string[]; state: string }) => {
    builds += 1;
    return db.selectFrom("jobs").select("id").where("id", "in", v.ids).where("state", "=", v.state);
  });
  const { engine, db } = ENGINES[0]!;
  assert.deepEqual(query.compile(db, engine, { ids: ["a", "b"], state: "running" }).parameters, ["a", "b", "running"]);
  assert.deepEqual(query.compile(db, engine, { ids: ["c", "d"], state: "failed" }).parameters, ["c", "d", "failed"]);
  assert.equal(builds, 1);
  assert.equal(
    query.compile(db, engine, { ids: ["e"], state: "failed" }).sql,
    'select "id" from "jobs" where "id" in (?) and "state" = ?',
  );
  assert.equal(builds, 2);
  query.compile(ENGINES[1]!.db, POSTGRES, { ids: ["e"], state: "failed" });
  assert.equal(builds, 3, "each engine has its own SQL");
});
