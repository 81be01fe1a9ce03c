// The GraphStore contract as a reusable suite, run against SQLite
// (sqlite-graph-store.test.ts) and PostgreSQL (postgres-graph-store.test.ts):
// graph versions, graph jobs, step jobs, and the CheckpointStore contract of
// @oz0/graph (checkpoint-store.ts) its checkpoints must honour: a recorded
// step is durable once recordStep resolves, and the first record for a path
// wins (a second writer, even another replica's store, gets it back).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  GraphRunner,
  Harness,
  InProcessExecutor,
  Step,
  type GraphDefinition,
  type HarnessContext,
  type RunRecord,
  type StepRecord,
} from "@oz0/graph";
import type { GraphStore, NewGraphVersion } from "../src/store/graph-store.js";

/**
 * Each call to `open` is a store on the same storage, as another replica (or
 * a restarted orchestrator) would open it; `cleanup` runs after closing them.
 */
export type GraphStoreFactory = () => Promise<{ open: () => Promise<GraphStore>; cleanup?: () => Promise<void> }>;

const definition: GraphDefinition = new Harness("support").toDefinition();

function runRecord(runId: string, overrides: Partial<RunRecord> = {}): RunRecord {
  // Keys in an order a sorting store would change: the bag's key order must come back as written.
  return {
    runId,
    graph: "support",
    definitionHash: "sha256:support",
    definition,
    input: { zeta: 1, prompt: "hello", alpha: { b: 2, a: 1 } },
    status: "running",
    startedAt: "2030-01-02T03:04:05Z",
    ...overrides,
  };
}

function version(name: string, hash: string): NewGraphVersion {
  return {
    name,
    contentHash: hash,
    plugin: "example",
    pluginVersion: "0.1.0",
    pluginPath: `/plugins/example/${hash}`,
    definition: { ...new Harness(name).toDefinition(), version: `label ${hash}` },
  };
}

/** Fails its first run: the run fails there, and a resumed run runs it again. */
class FlakyOnce extends Step {
  static failures = 0;

  public constructor() {
    super("flaky");
  }

  public run(ctx: HarnessContext): void {
    if (FlakyOnce.failures++ === 0) throw new Error("first attempt fails");
    ctx.set("flaky", "ok");
  }
}

class Count extends Step {
  static runs = 0;

  public constructor() {
    super("count");
  }

  public run(ctx: HarnessContext): void {
    ctx.set("count", ++Count.runs);
  }
}

export function graphStoreSuite(name: string, factory: GraphStoreFactory): void {
  const withStores = async (fn: (open: () => Promise<GraphStore>) => Promise<void>): Promise<void> => {
    const { open, cleanup } = await factory();
    const opened: GraphStore[] = [];
    try {
      await fn(async () => {
        const store = await open();
        opened.push(store);
        return store;
      });
    } finally {
      for (const store of opened) await store.close();
      await cleanup?.();
    }
  };

  void test(`${name}: a run reads back as it was stored, runs list oldest first, and a run id is taken once`, () =>
    withStores(async (open) => {
      const { checkpoints } = await open();
      await checkpoints.createRun(runRecord("run-a", { definitionVersion: "3" }));
      await checkpoints.createRun(runRecord("run-b"));
      const a = await checkpoints.getRun("run-a");
      assert.deepEqual(a, { ...runRecord("run-a", { definitionVersion: "3" }), conflicts: [] });
      assert.deepEqual(Object.keys(a!.input), ["zeta", "prompt", "alpha"], "the bag's keys in the order written");
      assert.equal(await checkpoints.getRun("run-unknown"), null);
      assert.deepEqual(
        (await checkpoints.listRuns()).map((r) => r.runId),
        ["run-a", "run-b"],
      );
      await assert.rejects(checkpoints.createRun(runRecord("run-a")));
    }));

  void test(`${name}: the first record for a path wins, also against another store on the same storage, and holds only the step's delta`, () =>
    withStores(async (open) => {
      const one = (await open()).checkpoints;
      const two = (await open()).checkpoints;
      await one.createRun(runRecord("run-1"));
      const first: StepRecord = {
        path: "/0",
        nodeId: "step:a",
        iteration: 0,
        outcome: "ok",
        delta: { z: 1, a: [1, 2] },
      };
      assert.deepEqual(await one.recordStep("run-1", first), first);
      const again = await two.recordStep("run-1", { ...first, delta: { z: 2 } });
      assert.deepEqual(again, first, "the second writer gets the first record back");
      assert.deepEqual(Object.keys(again.delta), ["z", "a"]);
      // Writers racing for one path (replicas resuming one run): every one of them gets the same record.
      const racers = Array.from({ length: 6 }, (_, i) =>
        (i % 2 === 0 ? one : two).recordStep("run-1", {
          path: "/1",
          nodeId: "step:b",
          iteration: 0,
          outcome: "ok",
          delta: { b: i },
        }),
      );
      const results = await Promise.all(racers);
      assert.equal(new Set(results.map((r) => JSON.stringify(r))).size, 1, `one winner: ${JSON.stringify(results)}`);
      // Control records: an empty delta, a decision, and a decision that is JSON null.
      const control: StepRecord = {
        path: "/2",
        nodeId: "loop:x",
        iteration: 3,
        outcome: "control",
        delta: {},
        decision: { action: "skip" },
      };
      const nullDecision: StepRecord = {
        path: "/3",
        nodeId: "loop:y",
        iteration: 0,
        outcome: "control",
        delta: {},
        decision: null,
      };
      await one.recordStep("run-1", control);
      await one.recordStep("run-1", nullDecision);
      const steps = new Map((await two.loadSteps("run-1")).map((s) => [s.path, s]));
      assert.deepEqual([...steps.keys()].sort(), ["/0", "/1", "/2", "/3"]);
      assert.deepEqual(steps.get("/1"), results[0]);
      assert.deepEqual(steps.get("/2"), control);
      assert.deepEqual(steps.get("/3"), nullDecision);
      assert.equal("decision" in steps.get("/0")!, false, "no decision stays absent");
      await assert.rejects(one.recordStep("run-unknown", first), /run-unknown/);
    }));

  void test(`${name}: a recorded step is there for a store opened afterwards; a run's end is written once and a reopened run runs again`, () =>
    withStores(async (open) => {
      const one = (await open()).checkpoints;
      await one.createRun(runRecord("run-1"));
      await one.recordStep("run-1", { path: "/0", nodeId: "step:a", iteration: 0, outcome: "ok", delta: { a: 1 } });
      const later = (await open()).checkpoints;
      assert.deepEqual(await later.loadSteps("run-1"), [
        { path: "/0", nodeId: "step:a", iteration: 0, outcome: "ok", delta: { a: 1 } },
      ]);
      const conflicts = [{ path: "/1", nodeId: "parallel:p", key: "k", branches: [0, 1], winner: 1 }];
      await later.finishRun("run-1", {
        status: "failed",
        error: { code: "STEP_FAILED", message: "no" },
        conflicts,
        result: { a: 1 },
      });
      const ended = await one.getRun("run-1");
      assert.equal(ended?.status, "failed");
      assert.deepEqual(ended?.error, { code: "STEP_FAILED", message: "no" });
      assert.deepEqual(ended?.conflicts, conflicts);
      assert.deepEqual(ended?.result, { a: 1 });
      assert.ok(ended?.finishedAt);
      assert.deepEqual(
        (await one.listRuns({ status: "failed" })).map((r) => r.runId),
        ["run-1"],
      );
      assert.deepEqual(await one.listRuns({ status: "running" }), []);
      await one.reopenRun("run-1");
      const reopened = await later.getRun("run-1");
      assert.equal(reopened?.status, "running");
      assert.equal(reopened?.finishedAt, undefined);
      assert.equal(reopened?.error, undefined);
      assert.equal(reopened?.result, undefined);
    }));

  void test(`${name}: a failed run resumed through another store replays its recorded steps and runs the rest`, () =>
    withStores(async (open) => {
      const harness = new Harness("resumable");
      harness.next(new Count()).next(new FlakyOnce());
      const def = harness.toDefinition();
      const executor = new InProcessExecutor({ steps: [new Count(), new FlakyOnce()] });
      Count.runs = 0;
      FlakyOnce.failures = 0;
      const failed = await new GraphRunner({ definition: def, executor, store: (await open()).checkpoints }).run({
        prompt: "p",
        runId: "run-r",
      });
      assert.equal(failed.status, "failed");
      const resumed = await (
        await new GraphRunner({ definition: def, executor, store: (await open()).checkpoints }).resume({
          runId: "run-r",
        })
      ).result;
      assert.equal(resumed.status, "succeeded", JSON.stringify(resumed.error));
      assert.equal(Count.runs, 1, "the recorded step was replayed, not run again");
      assert.deepEqual({ count: resumed.bag.count, flaky: resumed.bag.flaky }, { count: 1, flaky: "ok" });
    }));

  void test(`${name}: one version per content hash, even when two stores publish the same graph at once`, () =>
    withStores(async (open) => {
      const one = await open();
      const two = await open();
      const [a, b] = await Promise.all([
        one.publishVersion(version("inbox", "h1")),
        two.publishVersion(version("inbox", "h1")),
      ]);
      assert.deepEqual([a.published, b.published].sort(), [false, true]);
      assert.equal(a.record.version, 1);
      assert.deepEqual(b.record, a.record);
      const v2 = await two.publishVersion(version("inbox", "h2"));
      assert.equal(v2.published, true);
      assert.equal(v2.record.version, 2);
      assert.deepEqual(await one.publishVersion(version("inbox", "h2")), { published: false, record: v2.record });
      await one.publishVersion(version("article", "h3"));
      assert.equal((await one.getVersion("inbox"))?.version, 2);
      const v1 = await two.getVersion("inbox", 1);
      assert.deepEqual(v1?.definition, version("inbox", "h1").definition);
      assert.equal(v1?.contentHash, "h1");
      assert.equal(v1?.pluginPath, "/plugins/example/h1");
      assert.ok(v1?.publishedAt instanceof Date);
      assert.equal(await one.getVersion("inbox", 3), undefined);
      assert.equal(await one.getVersion("nothing"), undefined);
      assert.deepEqual(
        (await two.listLatestVersions()).map((v) => `${v.name} v${v.version}`),
        ["article v1", "inbox v2"],
      );
    }));

  void test(`${name}: a graph job's pins and its steps' jobs are found by the next store; a retried step's job replaces the failed one`, () =>
    withStores(async (open) => {
      const one = await open();
      const createdAt = new Date("2030-01-02T03:04:05.678Z");
      await one.putGraphJob({
        jobId: "graph_1",
        graph: "inbox",
        version: 2,
        pinnedAgents: { triage: 3, writer: 1 },
        createdAt,
      });
      await assert.rejects(
        one.putGraphJob({ jobId: "graph_1", graph: "inbox", version: 3, pinnedAgents: {}, createdAt }),
      );
      await one.putStepJob({ idempotencyKey: "graph_1/0", runId: "graph_1", stepJobId: "job_a" });
      const two = await open();
      assert.deepEqual(await two.getGraphJob("graph_1"), {
        jobId: "graph_1",
        graph: "inbox",
        version: 2,
        pinnedAgents: { triage: 3, writer: 1 },
        createdAt,
      });
      assert.equal(await two.getGraphJob("graph_2"), undefined);
      assert.equal(await two.getStepJob("graph_1/0"), "job_a");
      await two.putStepJob({ idempotencyKey: "graph_1/0", runId: "graph_1", stepJobId: "job_b" });
      assert.equal(await one.getStepJob("graph_1/0"), "job_b");
      assert.equal(await one.getStepJob("graph_1/1"), undefined);
      await one.putStepJob({
        idempotencyKey: "graph_1#manager:step_error@/0:1:1:ab",
        runId: "graph_1",
        stepJobId: "job_m",
      });
      await one.putStepJob({ idempotencyKey: "graph_9/0", runId: "graph_9", stepJobId: "job_other" });
      // A run's jobs, for its usage: the retried step's latest job, then the manager's.
      assert.deepEqual(
        (await two.listStepJobs("graph_1")).map((r) => [r.idempotencyKey, r.stepJobId]),
        [
          ["graph_1/0", "job_b"],
          ["graph_1#manager:step_error@/0:1:1:ab", "job_m"],
        ],
      );
      assert.deepEqual(await two.listStepJobs("graph_2"), []);
    }));
}
