// needs: postgres
// Harness-operation records in both job stores: insert, replace, read, and
// list what is not delivered yet — so a restarted orchestrator (SQLite) or
// the replica that takes a job over (PostgreSQL) resumes the job's operations.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import type { JobStore, OperationCheckpoint } from "../src/store/job-store.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";

function record(callId: string, overrides: Partial<OperationCheckpoint> = {}): OperationCheckpoint {
  return {
    jobId: "job_1",
    callId,
    invocationId: `opi_${callId}`,
    operationKey: "extract_shipment",
    task: "Extract order 4831",
    startedAt: new Date(0).toISOString(),
    status: "running",
    delivered: false,
    scratchSessionIds: [],
    ...overrides,
  };
}

async function exercise(store: JobStore): Promise<void> {
  assert.equal(await store.getOperationCheckpoint("job_1", "rt-1"), undefined);
  await store.putOperationCheckpoint(record("rt-1"));
  await store.putOperationCheckpoint(record("rt-2"));
  await store.putOperationCheckpoint(record("rt-3", { jobId: "job_2" }));
  await store.putOperationCheckpoint(
    record("rt-1", { status: "validated", result: { shipmentReference: "SHP-4831" }, scratchSessionIds: ["ses_op_a"] }),
  );
  await store.putOperationCheckpoint(
    record("rt-2", {
      status: "failed",
      error: "operation_timed_out: late",
      errorCode: "operation_timed_out",
      delivered: true,
    }),
  );
  assert.deepEqual(
    await store.getOperationCheckpoint("job_1", "rt-1"),
    record("rt-1", { status: "validated", result: { shipmentReference: "SHP-4831" }, scratchSessionIds: ["ses_op_a"] }),
  );
  assert.deepEqual(
    (await store.listOperationCheckpoints("job_1")).map((r) => [r.callId, r.status, r.delivered]),
    [
      ["rt-1", "validated", false],
      ["rt-2", "failed", true],
    ],
  );
  assert.deepEqual(
    (await store.listOperationCheckpoints("job_2")).map((r) => r.callId),
    ["rt-3"],
  );
}

void test("sqlite: operation records", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-ops-store-"));
  const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
  try {
    await exercise(store);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

void test("postgres: operation records", async () => {
  const schema = freshSchema();
  const store = await PostgresJobStore.open({ connectionString: databaseUrl(), schema, maxConnections: 2 });
  try {
    await exercise(store);
  } finally {
    await store.close();
    await dropSchema(schema);
  }
});
