// needs: postgres
// Two people answer one waiting call at once, each at a replica of its own
// (PostgreSQL): both replicas read the call waiting, then both write. The
// first answer stands and is the only one recorded; the second is refused,
// saying whose answer stood. Before, a second approval (the same decision,
// another person, another edited input) was written over the first: the
// record named bob and bob's input while the session had been sent alice's,
// and the job's events held two answers. One after the other (one
// orchestrator), an approval with another edited input was accepted as the
// first one, and its sender read that their input was approved.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { createLogger } from "@oz0/serving";
import { ApprovalService } from "../src/approvals/approval-service.js";
import { soleOwnership } from "../src/cluster/job-ownership.js";
import { ActiveJobs } from "../src/jobs/active-jobs.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import { OrchestratorError } from "../src/orchestrator-error.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import type { JobStore, PermissionRecord } from "../src/store/job-store.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { permission } from "./job-store-suite.js";
import { databaseUrl, dropSchema, freshSchema, jobRecord } from "./postgres-test-support.js";

const logger = createLogger({ name: "concurrent-answers", level: "error" });

/** One replica's approval service, on a store of its own over the shared schema. */
function replica(store: JobStore): ApprovalService {
  return new ApprovalService({
    store,
    feed: new JobFeed(),
    policy: new PermissionPolicy(),
    logger,
    ownership: soleOwnership,
    active: new ActiveJobs({ logger }),
  });
}

/**
 * `store`, whose reads of a permission say so (`read`), then wait for `until`: its replica decides on what it
 * read, and writes only after the other replica's answer is committed.
 */
function readingThenWaiting(store: PostgresJobStore, o: { read: () => void; until: Promise<void> }): JobStore {
  return new Proxy(store, {
    get(target, key) {
      if (key === "getPermission")
        return async (jobId: string, id: string): Promise<PermissionRecord | undefined> => {
          const read = await target.getPermission(jobId, id);
          o.read();
          await o.until;
          return read;
        };
      const value = Reflect.get(target, key, target) as unknown;
      return typeof value === "function" ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}

async function withTwoReplicas(
  fn: (o: { first: PostgresJobStore; second: PostgresJobStore; schema: string }) => Promise<void>,
): Promise<void> {
  const schema = freshSchema();
  const first = await PostgresJobStore.open({ connectionString: databaseUrl(), schema, maxConnections: 4 });
  const second = await PostgresJobStore.open({ connectionString: databaseUrl(), schema, maxConnections: 4 });
  try {
    await first.createJob(jobRecord("j1", { state: "waiting" }));
    await first.append({ jobId: "j1", events: [], permissions: [permission("j1", "p1")] });
    await fn({ first, second, schema });
  } finally {
    await first.close();
    await second.close();
    await dropSchema(schema);
  }
}

/** The answers the job's events hold for call p1 (its decisions that no longer wait). */
async function answersRecorded(store: JobStore): Promise<{ answeredBy: string; input: unknown }[]> {
  return (await store.listJobEvents("j1", 0)).flatMap((e) =>
    e.event.case === "permissionDecision" && !e.event.value.pending
      ? [{ answeredBy: e.event.value.answeredBy, input: e.event.value.input }]
      : [],
  );
}

void test("postgres: two approvals of one call at once, with different inputs: the first stands, the second is refused", async () => {
  await withTwoReplicas(async ({ first, second }) => {
    const bobRead = Promise.withResolvers<void>();
    const aliceAnswered = Promise.withResolvers<void>();
    const bob = replica(readingThenWaiting(second, { read: bobRead.resolve, until: aliceAnswered.promise })).answer({
      jobId: "j1",
      callId: "p1",
      allow: true,
      input: { command: "npm test -- --bob" },
      answeredBy: { id: "bob", groups: [] },
    });
    let alice: PermissionRecord;
    try {
      await bobRead.promise;
      alice = await replica(first).answer({
        jobId: "j1",
        callId: "p1",
        allow: true,
        input: { command: "npm test -- --alice" },
        answeredBy: { id: "alice", groups: [] },
      });
    } finally {
      aliceAnswered.resolve();
    }
    assert.equal(alice.answeredBy, "alice");
    await assert.rejects(bob, (error: unknown) => {
      assert.ok(error instanceof OrchestratorError, String(error));
      assert.equal(error.code, "failed_precondition");
      assert.match(
        error.message,
        /call p1 was already approved by alice with another input; a different answer is refused/,
      );
      return true;
    });
    const stored = await first.getPermission("j1", "p1");
    assert.equal(stored?.answeredBy, "alice", "the first answer stands");
    assert.deepEqual(stored?.answerInput, { command: "npm test -- --alice" }, "with the input the session was sent");
    assert.deepEqual(await answersRecorded(first), [
      { answeredBy: "alice", input: { command: "npm test -- --alice" } },
    ]);
  });
});

void test("an approval with another edited input, after the call was approved, is refused rather than accepted as the first", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-answers-"));
  const store = new SqliteJobStore({ file: path.join(dir, "orchestrator.db") });
  try {
    await store.createJob(jobRecord("j1", { state: "waiting" }));
    await store.append({ jobId: "j1", events: [], permissions: [permission("j1", "p1")] });
    const approvals = replica(store);
    const alice = { id: "alice", groups: [] };
    const input = { command: "npm test -- --alice" };
    await approvals.answer({ jobId: "j1", callId: "p1", allow: true, input, answeredBy: alice });
    const again = await approvals.answer({ jobId: "j1", callId: "p1", allow: true, input, answeredBy: alice });
    assert.equal(again.answeredBy, "alice", "the same answer twice is accepted once");
    const plain = await approvals.answer({ jobId: "j1", callId: "p1", allow: true, answeredBy: alice });
    assert.deepEqual(
      plain.answerInput,
      input,
      "an approve without an input, from the one who edited it, is the same answer",
    );
    // Another person's plain approve means the input the call waited with, which is not what ran.
    await assert.rejects(
      approvals.answer({ jobId: "j1", callId: "p1", allow: true, answeredBy: { id: "bob", groups: [] } }),
      /call p1 was already approved by alice with another input; a different answer is refused/,
    );
    await assert.rejects(
      approvals.answer({
        jobId: "j1",
        callId: "p1",
        allow: true,
        input: { command: "npm test -- --bob" },
        answeredBy: { id: "bob", groups: [] },
      }),
      /call p1 was already approved by alice with another input; a different answer is refused/,
    );
    assert.deepEqual(await answersRecorded(store), [{ answeredBy: "alice", input }]);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
