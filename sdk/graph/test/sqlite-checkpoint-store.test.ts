// The SQLite store: migrations on a shared handle, first-write-wins records,
// and storage that grows linearly with steps (counted in rows and bytes).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import Database from "better-sqlite3";
import {
  GraphRunner,
  Harness,
  InProcessExecutor,
  SqliteCheckpointStore,
  Step,
  type HarnessContext,
  type StepRunInfo,
} from "../src/index.js";

const dir = mkdtempSync(path.join(tmpdir(), "oz0-graph-sqlite-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Writes one new key per step, so the bag grows with every step. */
class Grow extends Step {
  public constructor(i: number) {
    super(`grow-${i}`);
  }

  public run(ctx: HarnessContext, info: StepRunInfo): void {
    ctx.set(`key-${this.name}`, `value of ${info.idempotencyKey}`.padEnd(48, "."));
  }
}

async function runChain(store: SqliteCheckpointStore, n: number, runId: string): Promise<void> {
  const h = new Harness(`grow-${n}`);
  const steps = Array.from({ length: n }, (_, i) => new Grow(i));
  let link = h.next(steps[0] as Step);
  for (const s of steps.slice(1)) link = link.next(s);
  const result = await new GraphRunner({
    definition: h.toDefinition(),
    executor: new InProcessExecutor({ steps }),
    store,
  }).run({ prompt: "p", runId });
  assert.equal(result.status, "succeeded");
  assert.equal(Object.keys(result.bag).length, n + 1);
}

function stepBytes(db: Database.Database, runId: string): { rows: number; bytes: number } {
  return db
    .prepare(
      `SELECT COUNT(*) AS rows, SUM(LENGTH(s.path) + LENGTH(s.node_id) + LENGTH(s.outcome) + 8 + COALESCE(LENGTH(s.delta), 0) + COALESCE(LENGTH(s.decision), 0)) AS bytes
       FROM graph_steps s JOIN graph_runs r ON r.id = s.run WHERE r.run_id = ?`,
    )
    .get(runId) as { rows: number; bytes: number };
}

void test("storage grows linearly with steps: one row per step holding only that step's delta", async () => {
  const store = new SqliteCheckpointStore({ database: path.join(dir, "linear.db"), synchronous: "normal" });
  await runChain(store, 100, "r100");
  await runChain(store, 400, "r400");
  const small = stepBytes(store.db, "r100");
  const large = stepBytes(store.db, "r400");
  assert.equal(small.rows, 100);
  assert.equal(large.rows, 400);
  // Whole-bag checkpoints would grow 16x here (4x steps × 4x bag); deltas grow 4x,
  // plus a little for longer step numbers in names and paths.
  const ratio = large.bytes / small.bytes;
  assert.ok(ratio > 3.9 && ratio < 4.3, `bytes grew ${ratio}x for 4x steps`);
  // A definition is stored once per hash, not per run: a second run of the first graph adds none.
  await runChain(store, 100, "r100-again");
  assert.equal((store.db.prepare("SELECT COUNT(*) AS n FROM graph_definitions").get() as { n: number }).n, 2);
  store.close();
});

void test("migrations apply once on a handle shared with other tables, and records are first-write-wins", async () => {
  const db = new Database(path.join(dir, "shared.db"));
  db.exec("CREATE TABLE orchestrator_jobs (id TEXT PRIMARY KEY)");
  const one = new SqliteCheckpointStore({ database: db });
  const two = new SqliteCheckpointStore({ database: db });
  assert.equal(two.schemaVersion(), 1);
  assert.equal((db.prepare("SELECT COUNT(*) AS n FROM graph_migrations").get() as { n: number }).n, 1);

  const h = new Harness("shared");
  await one.createRun({
    runId: "r",
    graph: "shared",
    definitionHash: "sha256:x",
    definition: h.toDefinition(),
    input: { prompt: "p" },
    status: "running",
    startedAt: new Date().toISOString(),
  });
  const first = await one.recordStep("r", {
    path: "/0",
    nodeId: "step:a",
    iteration: 0,
    outcome: "ok",
    delta: { a: 1 },
  });
  const second = await two.recordStep("r", {
    path: "/0",
    nodeId: "step:a",
    iteration: 0,
    outcome: "ok",
    delta: { a: 2 },
  });
  assert.deepEqual(first.delta, { a: 1 });
  assert.deepEqual(second.delta, { a: 1 }, "the second writer gets the first record back");
  assert.deepEqual(
    (await two.listRuns({ status: "running" })).map((r) => r.runId),
    ["r"],
  );
  await one.finishRun("r", { status: "succeeded", conflicts: [], result: { a: 1 } });
  const run = await two.getRun("r");
  assert.equal(run?.status, "succeeded");
  assert.deepEqual(run?.result, { a: 1 });
  one.close();
  // A shared handle stays open for its owner.
  assert.equal((db.prepare("SELECT COUNT(*) AS n FROM orchestrator_jobs").get() as { n: number }).n, 0);
  db.close();
});
