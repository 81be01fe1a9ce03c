// needs: postgres
// The GraphStore suite on a real PostgreSQL server, each test in a schema of
// its own. Each store is another replica's: its own pool, alternately the job
// store's (the schema found from the pool) and one opened with the schema
// named, as openGraphStore is called in either way. A replica that lost a
// run's lease has its writes to the run refused.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Harness, type GraphDefinition } from "@oz0/graph";
import { openGraphStore } from "../src/store/graph-store.js";
import { LeaseLostError, LeaseManager } from "../src/cluster/lease-manager.js";
import { createPostgresPool } from "../src/store/sql-database.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { graphStoreSuite } from "./graph-store-suite.js";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";

const connectionString = databaseUrl();

graphStoreSuite("postgres", async () => {
  const schema = freshSchema();
  const closers: (() => Promise<void>)[] = [];
  let opened = 0;
  return {
    open: async () => {
      if (opened++ % 2 === 0) {
        const jobs = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
        closers.push(() => jobs.close());
        return openGraphStore({ pool: jobs.pool, home: "/nonexistent" });
      }
      const pool = createPostgresPool({ connectionString, schema, maxConnections: 4 });
      closers.push(() => pool.end());
      return openGraphStore({ pool, schema, home: "/nonexistent" });
    },
    cleanup: async () => {
      for (const close of closers) await close();
      await dropSchema(schema);
    },
  };
});

void test("postgres: a replica that lost a graph run's lease can write neither its checkpoints nor its step jobs", async () => {
  const schema = freshSchema();
  const jobs = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
  const first = await LeaseManager.open({ pool: jobs.pool, owner: "replica-a" });
  const second = await LeaseManager.open({ pool: jobs.pool, owner: "replica-b" });
  try {
    // A lease that expires at once stands for an owner that stopped renewing (paused, partitioned).
    const stale = await first.acquire("job", "run-1", { ttlMs: 0 });
    assert.ok(stale);
    const asFirst = await openGraphStore({
      pool: jobs.pool,
      home: "/nonexistent",
      fences: { fenceFor: (id) => (id === "run-1" ? stale : undefined) },
    });
    const definition: GraphDefinition = new Harness("support").toDefinition();
    await asFirst.checkpoints.createRun({
      runId: "run-1",
      graph: "support",
      definitionHash: "sha256:s",
      definition,
      input: {},
      status: "running",
      startedAt: "2030-01-02T03:04:05Z",
    });
    await asFirst.putStepJob({ idempotencyKey: "run-1/step", runId: "run-1", stepJobId: "job_first" });

    const taken = await second.acquire("job", "run-1");
    assert.ok(taken, "the expired lease is taken over");
    const asSecond = await openGraphStore({ pool: jobs.pool, home: "/nonexistent", fences: { fenceFor: () => taken } });
    await asSecond.putStepJob({ idempotencyKey: "run-1/step", runId: "run-1", stepJobId: "job_second" });

    await assert.rejects(
      asFirst.putStepJob({ idempotencyKey: "run-1/step", runId: "run-1", stepJobId: "job_stale" }),
      LeaseLostError,
    );
    await assert.rejects(
      asFirst.checkpoints.recordStep("run-1", { path: "0", nodeId: "a", iteration: 0, outcome: "ok", delta: {} }),
      LeaseLostError,
    );
    await assert.rejects(
      asFirst.checkpoints.finishRun("run-1", { status: "failed", conflicts: [], result: {} }),
      LeaseLostError,
    );
    assert.equal(await asSecond.getStepJob("run-1/step"), "job_second", "the new owner's step job stands");
    assert.deepEqual(await asSecond.checkpoints.loadSteps("run-1"), []);
    assert.equal((await asSecond.checkpoints.getRun("run-1"))?.status, "running");
  } finally {
    await first.close();
    await second.close();
    await jobs.close();
    await dropSchema(schema);
  }
});
