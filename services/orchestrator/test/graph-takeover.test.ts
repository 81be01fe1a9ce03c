// needs: postgres
// A graph job changes replicas. Two orchestrator replicas in this process,
// each with its own job store pool, job feed, job runner and GraphJobs, share
// one PostgreSQL schema, a real sandbox and the LLM proxy (with the scripted
// model). Replica A starts a graph run; while its first step's job runs
// (at A), A loses the graph job's lease and abandons it, and replica B takes
// it over with resumeJob: B resumes from the shared checkpoints, waits for
// the step's job A still runs (B's feed never hears of it: B reads it from
// the store), then runs the last step itself. The step is not run twice, A
// writes nothing more, and the lease is released by B when the job ends.
// Then a managed run changes replicas while its manager decides: B's runner
// serves the manager's job its decision tools, and B's run reads the decision.
import assert from "node:assert/strict";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { createLogger, stackTokenFor } from "@oz0/serving";
import type { ScriptedTurn } from "@oz0/harness/testing";
import { GRAPH_MANAGER_TOOLS, graphManagerTools } from "../src/graphs/graph-manager-agent.js";
import { GraphJobs } from "../src/graphs/graph-jobs.js";
import { GraphRegistry } from "../src/graphs/graph-registry.js";
import { openGraphStore, type GraphStore } from "../src/store/graph-store.js";
import { HookStage } from "../src/policy/hook-stage.js";
import { JobFeed } from "../src/jobs/job-feed.js";
import type { JobOwnership } from "../src/cluster/job-ownership.js";
import { JobRunner } from "../src/jobs/job-runner.js";
import { isTerminal, type JobRecord } from "../src/store/job-store.js";
import { LlmProxyClient } from "../src/sessions/llm-proxy-client.js";
import { PermissionPolicy } from "../src/policy/permission-policy.js";
import { PluginRegistry } from "../src/plugins/plugin-registry.js";
import { PostgresJobStore } from "../src/store/postgres-store.js";
import { SandboxClient } from "../src/sessions/sandbox-client.js";
import { StaticPlacement } from "../src/sessions/sandbox-placement.js";
import { agentOf } from "./support/graph-agents.js";
import { databaseUrl, dropSchema, eventually, freshSchema } from "./postgres-test-support.js";
import { packageDir, startTestStack, type TestStack } from "./support/test-stack.js";

const schema = freshSchema();
const fixture = path.join(packageDir, "test/fixtures/graphs/crash");

/** The slow step's model call waits for this, so its job is running for as long as the test needs. */
let releaseSlow!: () => void;
const slowReleased = new Promise<void>((resolve) => (releaseSlow = resolve));
/** Likewise the manager's first model call: it decides only once its job has changed replicas. */
let releaseBoss!: () => void;
const bossReleased = new Promise<void>((resolve) => (releaseBoss = resolve));
let bossAsked!: () => void;
const bossAsking = new Promise<void>((resolve) => (bossAsked = resolve));
let flakyCalls = 0;

/** Ownership as a replica's leases would give it, driven by the test: who claimed, released, lost and took over what. */
class TestOwnership implements JobOwnership {
  readonly claimed: string[] = [];
  readonly released: string[] = [];
  readonly #owned = new Set<string>();
  readonly #store: PostgresJobStore;

  constructor(store: PostgresJobStore) {
    this.#store = store;
  }

  async claim(jobId: string): Promise<void> {
    assert.equal(await this.#store.getJob(jobId), undefined, "a graph job is claimed before it is stored");
    this.claimed.push(jobId);
    this.#owned.add(jobId);
  }

  owns(jobId: string): boolean {
    return this.#owned.has(jobId);
  }

  async release(jobId: string): Promise<void> {
    this.released.push(jobId);
    this.#owned.delete(jobId);
  }

  working<T>(_jobId: string, work: () => T): T {
    return work();
  }

  lose(jobId: string): void {
    this.#owned.delete(jobId);
  }

  adopt(jobId: string): void {
    this.#owned.add(jobId);
  }
}

interface Replica {
  home: string;
  store: PostgresJobStore;
  graphStore: GraphStore;
  feed: JobFeed;
  runner: JobRunner;
  registry: GraphRegistry;
  graphs: GraphJobs;
  ownership: TestOwnership;
  close(): Promise<void>;
}

let t: TestStack;
const replicas: Replica[] = [];
const homes: string[] = [];

async function replica(name: string): Promise<Replica> {
  const home = mkdtempSync(path.join(os.tmpdir(), `oz0-graph-takeover-${name}-`));
  homes.push(home);
  const logger = createLogger({ name: `orchestrator-${name}`, level: "warn" });
  const store = await PostgresJobStore.open({ connectionString: databaseUrl(), schema, maxConnections: 4 });
  const graphStore = await openGraphStore({ pool: store.pool, home });
  const feed = new JobFeed();
  const placement = new StaticPlacement({
    runners: [
      new SandboxClient({
        url: t.stack.urls.sandbox,
        token: stackTokenFor(t.stack.credentials, "orchestrator", "sandbox"),
      }),
    ],
  });
  const runner = new JobRunner({
    store,
    feed,
    placement,
    tokens: new LlmProxyClient({ url: t.stack.urls["llm-proxy"], token: t.stack.credentials.orchestrator }),
    policy: new PermissionPolicy({ hooks: [new HookStage()] }),
    home,
    logger,
    servedTools: { [GRAPH_MANAGER_TOOLS]: graphManagerTools },
  });
  const registry = new GraphRegistry({ graphStore, store });
  const ownership = new TestOwnership(store);
  const graphs = new GraphJobs({ graphStore, store, feed, jobs: runner, registry, placement, logger, ownership });
  const r: Replica = {
    home,
    store,
    graphStore,
    feed,
    runner,
    registry,
    graphs,
    ownership,
    async close() {
      await graphs.close();
      await runner.close();
      await graphStore.close();
      await store.close();
    },
  };
  replicas.push(r);
  return r;
}

/**
 * Installs the crash fixture's agents and publishes its chain graph through
 * the asynchronous registry (PluginRegistry still publishes graphs through
 * the synchronous, SQLite-only calls).
 */
async function install(r: Replica): Promise<void> {
  const copy = mkdtempSync(path.join(os.tmpdir(), "oz0-graph-takeover-plugin-"));
  homes.push(copy);
  cpSync(fixture, copy, { recursive: true });
  const manifest = path.join(copy, "oz0-plugin.yaml");
  writeFileSync(manifest, readFileSync(manifest, "utf8").replace(/^graphs:.*$/m, ""));
  const installed = await new PluginRegistry({ store: r.store, home: r.home }).install({ source: copy });
  for (const graph of await r.registry.prepare({
    root: installed.plugin.path,
    files: ["graphs/chain.yaml", "graphs/managed.yaml"],
    pluginAgents: [],
  })) {
    const published = await r.registry.publishVersion({
      graph,
      plugin: installed.plugin.name,
      pluginVersion: installed.plugin.version,
      pluginPath: installed.plugin.path,
    });
    assert.equal(published.record.version, 1);
  }
}

/** Jobs whose input starts with the run's prompt (the steps' jobs), by agent. */
async function stepJobs(r: Replica, prompt: string): Promise<Record<string, JobRecord[]>> {
  const out: Record<string, JobRecord[]> = {};
  for (const job of await r.store.listJobs({ limit: 500 }))
    if (!job.id.startsWith("graph_") && job.input.startsWith(prompt)) (out[job.agentName] ??= []).push(job);
  return out;
}

/** Waits for the graph job to end at `r`, and checks it ran to its last step. */
async function succeedsAt(r: Replica, graphJobId: string): Promise<void> {
  const done = await eventually(async () => {
    const job = await r.store.getJob(graphJobId);
    return job && isTerminal(job.state) ? job : undefined;
  }, `graph job ${graphJobId}'s end`);
  assert.equal(done.state, "succeeded", done.error);
  assert.equal(done.resultText, "finish done");
}

async function eventTexts(r: Replica, jobId: string): Promise<string[]> {
  const events = await r.store.listJobEvents(jobId, 0, 10_000);
  return events.flatMap((e) => (e.event.case === "text" ? [e.event.value.text] : []));
}

before(async () => {
  t = await startTestStack({
    pick: (async ({
      request,
      turn,
    }: {
      request: Parameters<typeof agentOf>[0];
      turn: number;
    }): Promise<ScriptedTurn> => {
      const agent = agentOf(request);
      if (agent === "slow") await slowReleased;
      // 400: not retried, so the step's first session fails and the graph's manager is asked.
      if (agent === "flaky" && ++flakyCalls === 1)
        return {
          fail: {
            status: 400,
            body: { type: "error", error: { type: "invalid_request_error", message: "scripted failure" } },
          },
        };
      if (agent === "boss" && turn === 0) {
        bossAsked();
        await bossReleased;
        return { toolCalls: [{ name: "retry", input: {} }] };
      }
      return { text: `${agent} done` };
    }) as unknown as Parameters<typeof startTestStack>[0]["pick"],
  });
});

after(async () => {
  releaseSlow();
  releaseBoss();
  for (const r of replicas) await r.close();
  await t?.close();
  await dropSchema(schema);
  for (const dir of homes) rmSync(dir, { recursive: true, force: true });
});

void test("a graph job abandoned by one replica is resumed by another from the shared checkpoints, waiting for the step job the first still runs", async () => {
  const a = await replica("a");
  const b = await replica("b");
  await install(a);
  assert.equal(await b.graphs.hasGraph("chain"), true, "a graph published at one replica is a graph at every one");

  const prompt = "takeover-run";
  const graphJob = await a.graphs.run({ graph: "chain", input: prompt });
  assert.deepEqual(a.ownership.claimed, [graphJob.id]);
  const slow = await eventually(
    async () => (await stepJobs(a, prompt)).slow?.find((j) => j.state === "running"),
    "the slow step's job running",
  );
  assert.equal(
    await a.graphStore.getStepJob(`${graphJob.id}/0`),
    slow.id,
    "the step's job is recorded in the shared store",
  );

  // A loses the graph job's lease (it keeps running the step's job, whose lease is its own) and B takes the graph job over.
  a.ownership.lose(graphJob.id);
  a.graphs.abandon(graphJob.id);
  b.ownership.adopt(graphJob.id);
  let heardAtB = 0;
  b.feed.subscribe(slow.id, () => heardAtB++);
  await b.graphs.resumeJob(graphJob.id);
  await b.graphs.resumeJob(graphJob.id); // a second takeover notice for the same job changes nothing
  assert.equal(isTerminal((await b.store.getJob(slow.id))!.state), false);
  releaseSlow();

  await succeedsAt(b, graphJob.id);
  assert.equal(heardAtB, 0, "B's feed never carried the step job's events: B saw it end by reading the store");

  const byAgent = await stepJobs(b, prompt);
  assert.deepEqual(
    byAgent.slow?.map((j) => j.id),
    [slow.id],
    "the slow step ran once, at A",
  );
  assert.equal(byAgent.finish?.length, 1, "the last step ran once: A, having abandoned the run, did not run it too");
  const steps = await b.graphStore.checkpoints.loadSteps(graphJob.id);
  assert.deepEqual(steps.map((s) => s.nodeId).sort(), ["agent:finish", "agent:slow"]);
  assert.equal((await b.graphStore.checkpoints.getRun(graphJob.id))?.status, "succeeded");

  const texts = await eventTexts(b, graphJob.id);
  assert.ok(
    texts.some((l) => l.includes("resumed from its checkpoints after the orchestrator running it stopped")),
    texts.join(""),
  );
  assert.ok(
    texts.some((l) => l.includes(`agent:slow /0: re-attached to job ${slow.id}`)),
    texts.join(""),
  );
  assert.equal(texts.filter((l) => l.includes("agent:finish /1 started")).length, 1, texts.join(""));
  assert.deepEqual(b.ownership.released, [graphJob.id], "the replica that ended the job released its lease");
  assert.deepEqual(a.ownership.released, [], "the replica that abandoned it did not");
});

void test("a graph run and its manager's job change replicas while the manager decides: the new owners serve its decision tools and read its decision", async () => {
  const [a, b] = [replicas[0]!, replicas[1]!];
  const prompt = "managed-run";
  const graphJob = await a.graphs.run({ graph: "managed", input: prompt });
  await bossAsking;
  const boss = (await a.store.listJobs({ limit: 500 })).find((j) => j.agentName === "boss")!;
  assert.equal(boss.servedTools, GRAPH_MANAGER_TOOLS, "the manager's job names the tools the orchestrator serves it");

  // A loses both: the graph job (to B's GraphJobs) and the manager's job (to B's runner), while the manager's model call is in flight.
  a.ownership.lose(graphJob.id);
  a.graphs.abandon(graphJob.id);
  a.runner.abandon(boss.id);
  b.ownership.adopt(graphJob.id);
  await b.runner.resumeJob(boss.id);
  await b.graphs.resumeJob(graphJob.id);
  releaseBoss();

  await succeedsAt(b, graphJob.id);
  const jobs = (await b.store.listJobs({ limit: 500 })).filter((j) => !j.id.startsWith("graph_"));
  assert.deepEqual(
    jobs.filter((j) => j.agentName === "boss").map((j) => j.id),
    [boss.id],
    "the manager was asked once, not again by B",
  );
  assert.deepEqual(
    jobs
      .filter((j) => j.agentName === "flaky")
      .map((j) => j.state)
      .sort(),
    ["failed", "succeeded"],
    "the step was retried as decided",
  );
  const decisions = (await b.store.listJobEvents(boss.id, 0, 10_000)).flatMap((e) =>
    e.event.case === "servedToolCall" ? [e.event.value] : [],
  );
  assert.deepEqual(
    decisions.map((d) => [d.tool, d.error]),
    [["retry", ""]],
    "B answered the manager's call and recorded it",
  );
  assert.ok(
    (await eventTexts(b, graphJob.id)).some((l) =>
      l.includes(`manager boss still decides step_error as job ${boss.id}`),
    ),
  );
});

void test("a step's job id is recorded before the job is created: a run resumed after a crash in between creates that job, not a second one", async () => {
  const [a, b] = [replicas[0]!, replicas[1]!];
  // A closing runner refuses new jobs, as a process dying right after recording the step would never create it.
  await a.runner.close();
  const prompt = "reserved-run";
  const graphJob = await a.graphs.run({ graph: "chain", input: prompt });
  const reserved = await eventually(
    async () => a.graphStore.getStepJob(`${graphJob.id}/0`),
    "the first step's job id recorded",
  );
  assert.equal(await a.store.getJob(reserved), undefined, "recorded, never created");

  a.ownership.lose(graphJob.id);
  a.graphs.abandon(graphJob.id);
  b.ownership.adopt(graphJob.id);
  await b.graphs.resumeJob(graphJob.id);
  await succeedsAt(b, graphJob.id);
  const byAgent = await stepJobs(b, prompt);
  assert.deepEqual(
    byAgent.slow?.map((j) => j.id),
    [reserved],
    "the step ran once, as the job recorded for it",
  );
  assert.equal(byAgent.finish?.length, 1);
});
