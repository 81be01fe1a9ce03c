// needs: postgres
// The shared JobStore suite against a real PostgreSQL server, each test in a
// schema of its own (the runner's DATABASE_URL is shared by every test file),
// plus what only a multi-replica store must get right: migrations racing at
// start-up, appends from two replicas, and fenced writes after a takeover.
import assert from "node:assert/strict";
import { test } from "node:test";
import { create } from "@bufbuild/protobuf";
import { rawEvent } from "@oz0/events-client";
import { JobEventSchema } from "@oz0/proto/oz0/orchestrator/v1/orchestrator_pb";
import { LeaseLostError, LeaseManager } from "../src/cluster/lease-manager.js";
import { migrateOrchestrator, ORCHESTRATOR_MIGRATIONS } from "../src/store/migrations.js";
import { createPostgresPool } from "../src/store/sql-database.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { jobStoreSuite } from "./job-store-suite.js";
import { databaseUrl, dropSchema, freshSchema, jobRecord } from "./postgres-test-support.js";

const connectionString = databaseUrl();
const job = (id: string) => jobRecord(id, { attachments: ["a.txt"] });
const textEvent = (text: string) => create(JobEventSchema, { event: { case: "text", value: { text } } });

jobStoreSuite("postgres", async () => {
  const schema = freshSchema();
  return {
    store: await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 }),
    cleanup: () => dropSchema(schema),
  };
});

void test("postgres: replicas starting at once apply each migration exactly once", async () => {
  const schema = freshSchema();
  const pools = Array.from({ length: 5 }, () => createPostgresPool({ connectionString, schema, maxConnections: 1 }));
  try {
    const ran = await Promise.all(pools.map((pool) => migrateOrchestrator(pool, schema)));
    const all = ran.flat().sort((a, b) => a - b);
    assert.deepEqual(
      all,
      ORCHESTRATOR_MIGRATIONS.map((m) => m.version),
      "every version applied once, by one of them",
    );
    const { rows } = await pools[0]!.query<{ version: number }>(
      "SELECT version FROM oz0_migrations WHERE component = 'orchestrator' ORDER BY version",
    );
    assert.deepEqual(
      rows.map((r) => r.version),
      ORCHESTRATOR_MIGRATIONS.map((m) => m.version),
    );
    assert.deepEqual(await migrateOrchestrator(pools[1]!, schema), [], "a later start finds nothing to do");
  } finally {
    await Promise.all(pools.map((pool) => pool.end()));
    await dropSchema(schema);
  }
});

void test("postgres: two replicas appending to one job get gap-free, unique sequence numbers", async () => {
  const schema = freshSchema();
  const a = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const b = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  try {
    await a.createJob(job("j1"));
    const appends = Array.from({ length: 40 }, (_, i) =>
      (i % 2 ? a : b).append({ jobId: "j1", events: [textEvent(`x${i}`), textEvent(`y${i}`)] }),
    );
    const stored = (await Promise.all(appends)).flat().map((e) => Number(e.seq));
    assert.deepEqual(
      stored.sort((x, y) => x - y),
      Array.from({ length: 80 }, (_, i) => i + 1),
    );
    const events = await b.listJobEvents("j1", 0);
    assert.deepEqual(
      events.map((e) => Number(e.seq)),
      Array.from({ length: 80 }, (_, i) => i + 1),
    );
    assert.equal((await a.getJob("j1"))?.lastSeq, 80);
    assert.deepEqual((await a.getJob("j1"))?.attachments, ["a.txt"]);
  } finally {
    await a.close();
    await b.close();
    await dropSchema(schema);
  }
});

void test("postgres: a stale owner's fenced writes are refused once another replica took the job over", async () => {
  const schema = freshSchema();
  const store = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const first = await LeaseManager.open({ pool: store.pool, owner: "replica-a" });
  const second = await LeaseManager.open({ pool: store.pool, owner: "replica-b" });
  try {
    await store.createJob(job("j1"));
    // A lease that expires at once stands for an owner that stopped renewing (paused, partitioned).
    const stale = await first.acquire("job", "j1", { ttlMs: 0 });
    assert.ok(stale);
    const asFirst = store.fenced(stale);
    await asFirst.append({ jobId: "j1", events: [textEvent("before takeover")] });

    const taken = await second.acquire("job", "j1");
    assert.ok(taken, "the expired lease is taken over");
    assert.ok(taken.token > stale.token, "a takeover hands out a newer token");
    const asSecond = store.fenced(taken);

    await assert.rejects(asFirst.append({ jobId: "j1", events: [textEvent("stale")] }), LeaseLostError);
    await assert.rejects(asFirst.updateJob("j1", { state: "failed" }), LeaseLostError);
    await asSecond.append({ jobId: "j1", events: [textEvent("new owner")], job: { state: "running" } });

    const texts = (await store.listJobEvents("j1", 0)).map((e) => (e.event.case === "text" ? e.event.value.text : ""));
    assert.deepEqual(texts, ["before takeover", "new owner"]);
    assert.equal((await store.getJob("j1"))?.state, "running");
    await asFirst.close();
  } finally {
    await first.close();
    await second.close();
    await store.close();
    await dropSchema(schema);
  }
});

void test("postgres: a claim leaves a job whose earlier events another replica holds, so a job's events are shipped in order", async () => {
  const schema = freshSchema();
  const a = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const b = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const claim = { limit: 10, claimMs: 60_000 };
  const typesOf = (claimed: { seq: number }[], all: Map<number, string>) => claimed.map((c) => all.get(c.seq));
  try {
    await a.putLifecycleEvents([
      rawEvent("job.created", { jobId: "job-x" }),
      rawEvent("job.created", { jobId: "job-y" }),
      rawEvent("job.created"),
    ]);
    await a.putLifecycleEvents([rawEvent("job.completed", { jobId: "job-x" }), rawEvent("job.completed")]);
    const names = new Map<number, string>();
    const name = (claimed: Awaited<ReturnType<typeof a.claimLifecycleEvents>>) => {
      for (const c of claimed) if ("event" in c) names.set(c.seq, `${c.event.jobId || "none"} ${c.event.type}`);
      return typesOf(claimed, names);
    };
    // Replica a sends job-x's creation; replica b, claiming meanwhile, must not send its completion first.
    const first = await a.claimLifecycleEvents({ limit: 1, claimMs: 60_000 });
    assert.deepEqual(name(first), ["job-x job.created"]);
    assert.deepEqual(name(await b.claimLifecycleEvents(claim)), [
      "job-y job.created",
      "none job.created",
      "none job.completed",
    ]);
    await a.deleteLifecycleEvents(first.map((c) => c.seq));
    assert.deepEqual(name(await b.claimLifecycleEvents(claim)), ["job-x job.completed"]);

    // Claims at once: each job's events all go to one of them.
    await a.putLifecycleEvents(
      Array.from({ length: 120 }, (_, i) => rawEvent("tool.called", { jobId: `job-${i % 6}` })),
    );
    const claims = await Promise.all(
      Array.from({ length: 12 }, (_, i) => (i % 2 ? a : b).claimLifecycleEvents({ limit: 15, claimMs: 60_000 })),
    );
    const claimerOf = new Map<string, number>();
    claims.forEach((claimed, i) => {
      for (const c of claimed) {
        if (!("event" in c)) continue;
        const before = claimerOf.get(c.event.jobId);
        assert.ok(before === undefined || before === i, `${c.event.jobId}'s events went to two claims`);
        claimerOf.set(c.event.jobId, i);
      }
    });
    assert.equal(claimerOf.size, 6, "every job's events were claimed");
  } finally {
    await a.close();
    await b.close();
    await dropSchema(schema);
  }
});

void test("postgres: replicas claiming lifecycle events at once each get other events, and all of them", async () => {
  const schema = freshSchema();
  const a = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const b = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  try {
    await a.putLifecycleEvents(Array.from({ length: 200 }, (_, i) => rawEvent("tool.called", { jobId: `j${i}` })));
    const claims = await Promise.all(
      Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).claimLifecycleEvents({ limit: 15, claimMs: 60_000 })),
    );
    const seqs = claims.flat().map((c) => c.seq);
    assert.equal(new Set(seqs).size, seqs.length, "no event claimed twice");
    assert.equal(seqs.length, 200, "every event claimed once");
  } finally {
    await a.close();
    await b.close();
    await dropSchema(schema);
  }
});
