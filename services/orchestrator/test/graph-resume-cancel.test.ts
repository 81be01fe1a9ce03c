// A cancel that lands while a graph job resumes, after its run is set up here
// and before the engine launched it, stops the run before any step job
// starts. The engine's runner could not take the cancel yet (no run in
// flight), so the job was finished as cancelled while the resume went on
// and started the step's job, which then ran with nobody waiting for it.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { GraphRunner, type GraphDefinition } from "@oz0/graph";
import { createLogger } from "@oz0/serving";
import { GraphJobs } from "../src/graphs/graph-jobs.js";
import { GraphRegistry } from "../src/graphs/graph-registry.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import type { JobRunner } from "../src/jobs/job-runner.js";
import type { SandboxPlacement } from "../src/sessions/sandbox-placement.js";
import { openGraphStore, type GraphStore } from "../src/store/graph-store.js";
import { isTerminal, type JobStore } from "../src/store/job-store.js";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { jobRecord } from "./postgres-test-support.js";
import { eventually } from "./support/eventually.js";

const definition: GraphDefinition = {
  format: "oz0.graph/v1",
  kind: "harness",
  name: "chain",
  id: "harness:chain",
  root: [{ kind: "agent", id: "agent:writer", agent: "writer" }],
};

void test("a cancel while a graph job resumes, before its run is launched, ends the run before any step job starts", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-graph-resume-cancel-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  const graphStore = await openGraphStore({ home });
  try {
    const registry = new GraphRegistry({ store, graphStore });
    const { record } = await registry.publishVersion({
      graph: { file: "chain.yaml", definition },
      plugin: "p",
      pluginVersion: "1",
      pluginPath: home,
    });
    // A graph job whose orchestrator stopped while its first step was in flight: the run is stored, no step recorded.
    const jobId = "graph_resumed";
    await store.createJob(jobRecord(jobId, { state: "running", agentName: "chain", agentVersion: record.version }));
    await graphStore.putGraphJob({
      jobId,
      graph: "chain",
      version: record.version,
      pinnedAgents: {},
      createdAt: new Date(),
    });
    const never = {
      runAgent: () => new Promise<never>(() => undefined),
      runCustomStep: () => new Promise<never>(() => undefined),
    };
    await new GraphRunner({ definition, executor: never, store: graphStore.checkpoints }).start({
      prompt: "p",
      runId: jobId,
    });

    // The step jobs the resumed run starts.
    const stepJobs: string[] = [];
    // Let go of the cancel's end of the job once the run either started a step job or ended.
    let letGo!: () => void;
    const settled = new Promise<void>((resolve) => (letGo = resolve));
    const jobs = {
      runAgent: async (options: { id: string }) => {
        stepJobs.push(options.id);
        letGo();
        return new Promise<never>(() => undefined);
      },
      cancel: async () => undefined,
    } as unknown as JobRunner;
    const checkpoints = graphStore.checkpoints;
    const watchedGraphStore = new Proxy(graphStore, {
      get: (target, key) =>
        key === "checkpoints"
          ? {
              ...Object.fromEntries(
                (["createRun", "getRun", "listRuns", "recordStep", "loadSteps", "reopenRun"] as const).map((m) => [
                  m,
                  checkpoints[m].bind(checkpoints),
                ]),
              ),
              finishRun: (...args: Parameters<typeof checkpoints.finishRun>) => {
                letGo();
                return checkpoints.finishRun(...args);
              },
            }
          : (Reflect.get(target, key) as unknown),
    }) as GraphStore;

    // The cancel lands as the resume writes its "resumed" note, after the run is set up here and before the
    // engine has it: the resume goes on once the cancel has found no run in flight and is ending the job.
    let cancelling!: () => void;
    const cancelDecided = new Promise<void>((resolve) => (cancelling = resolve));
    const watchedStore = new Proxy(store, {
      get: (target, key) => {
        if (key !== "append") return Reflect.get(target, key) as unknown;
        return async (step: Parameters<JobStore["append"]>[0]) => {
          const text = step.events.map((e) => (e.event.case === "text" ? e.event.value.text : "")).join("");
          if (text.startsWith("resumed")) {
            void graphs.cancel({ jobId, reason: "not needed any more" });
            await cancelDecided;
          } else if (step.job?.state === "cancelled") {
            cancelling();
            await settled;
          }
          return target.append(step);
        };
      },
    }) as JobStore;
    const placement = {} as SandboxPlacement;
    const graphs = new GraphJobs({
      graphStore: watchedGraphStore,
      store: watchedStore,
      feed: new JobFeed(),
      jobs,
      registry,
      placement,
      logger: createLogger({ name: "graph-resume-cancel", level: "error" }),
    });
    assert.equal(await graphs.resumeAll(), 1);
    const done = await eventually(async () => {
      const job = await store.getJob(jobId);
      return job && isTerminal(job.state) ? job : undefined;
    }, "the graph job's end");
    assert.equal(done.state, "cancelled", done.error);
    assert.deepEqual(stepJobs, [], "no step job started for the cancelled run");
    await graphs.close();
  } finally {
    await graphStore.close();
    await store.close();
    rmSync(home, { recursive: true, force: true });
  }
});

void test("a cancel as a new graph job is stored, before its run is launched, ends the run before any step starts", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-graph-create-cancel-"));
  const store = new SqliteJobStore({ file: path.join(home, "orchestrator.db") });
  const graphStore = await openGraphStore({ home });
  try {
    const registry = new GraphRegistry({ store, graphStore });
    // A custom step: no agent to pin, and its start is the placement of its session.
    await registry.publishVersion({
      graph: {
        file: "steps.yaml",
        definition: {
          ...definition,
          name: "steps",
          id: "harness:steps",
          root: [{ kind: "step", id: "step:s", step: "s", module: "s.mjs" }],
        },
      },
      plugin: "p",
      pluginVersion: "1",
      pluginPath: home,
    });
    const placed: string[] = [];
    let letGo!: () => void;
    const settled = new Promise<void>((resolve) => (letGo = resolve));
    const placement = {
      tracksNodes: false,
      lostSession: async () => undefined,
      release: async () => undefined,
      place: async (options: { sessionId: string }) => {
        placed.push(options.sessionId);
        letGo();
        return new Promise<never>(() => undefined);
      },
    } as unknown as SandboxPlacement;
    const checkpoints = graphStore.checkpoints;
    const watchedGraphStore = new Proxy(graphStore, {
      get: (target, key) =>
        key === "checkpoints"
          ? {
              ...Object.fromEntries(
                (["createRun", "getRun", "listRuns", "recordStep", "loadSteps", "reopenRun"] as const).map((m) => [
                  m,
                  checkpoints[m].bind(checkpoints),
                ]),
              ),
              finishRun: (...args: Parameters<typeof checkpoints.finishRun>) => {
                letGo();
                return checkpoints.finishRun(...args);
              },
            }
          : (Reflect.get(target, key) as unknown),
    }) as GraphStore;
    // The cancel lands once the job is stored, before the run is set up: the run goes on once the cancel found
    // no run in flight and is ending the job.
    let cancelling!: () => void;
    const cancelDecided = new Promise<void>((resolve) => (cancelling = resolve));
    const watchedStore = new Proxy(store, {
      get: (target, key) => {
        if (key === "createJob")
          return async (...args: Parameters<JobStore["createJob"]>) => {
            const created = await target.createJob(...args);
            void graphs.cancel({ jobId: args[0].id, reason: "not needed any more" });
            await cancelDecided;
            return created;
          };
        if (key === "append")
          return async (step: Parameters<JobStore["append"]>[0]) => {
            if (step.job?.state === "cancelled") {
              cancelling();
              await settled;
            }
            return target.append(step);
          };
        return Reflect.get(target, key) as unknown;
      },
    }) as JobStore;
    const graphs = new GraphJobs({
      graphStore: watchedGraphStore,
      store: watchedStore,
      feed: new JobFeed(),
      jobs: {} as JobRunner,
      registry,
      placement,
      logger: createLogger({ name: "graph-create-cancel", level: "error" }),
    });
    const job = await graphs.run({ graph: "steps", input: "go" });
    const done = await eventually(async () => {
      const current = await store.getJob(job.id);
      return current && isTerminal(current.state) ? current : undefined;
    }, "the graph job's end");
    assert.equal(done.state, "cancelled", done.error);
    assert.deepEqual(placed, [], "no step started for the cancelled run");
    await graphs.close();
  } finally {
    await graphStore.close();
    await store.close();
    rmSync(home, { recursive: true, force: true });
  }
});
